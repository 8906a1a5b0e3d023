"""Framework servers behind one wire contract (see servers/contract.py).

The registry is an explicit dict. Framework modules are imported only by the server
process that runs them (gevent and eventlet monkey-patch at import), never by the harness.
Entries come from three places, each named in `Framework.origin`: the builtin ones below,
plugins (the `serverbench.frameworks` entry point group: servers.plugins), and commands
the user gives (`harness compare --server NAME=COMMAND`, a servers file, a profile's
`[servers]` table: harness.frameworks); `register` adds the last two.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import string
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from servers import contract

SERVERS_DIR = Path(__file__).resolve().parent
NODE_DIR = SERVERS_DIR / "baselines" / "node"
EVENTMACHINE_SCRIPT = SERVERS_DIR / "baselines" / "eventmachine" / "server.rb"

# What `kind` means: how `python -m servers NAME` runs the server.
#   python: imports `module` and calls its serve(); node/ruby: execs the program on the
#   script `module` with the same arguments; nginx: servers.baselines.nginx renders a config and
#   runs nginx, writing the telemetry lines for it. command: the harness runs `command` itself
#   (not through `python -m servers`), its placeholders filled in; it writes no telemetry.
KINDS = ("python", "node", "ruby", "nginx", "command")
# Programs are looked up in sbin too: nginx lives in /usr/sbin, often outside a user's PATH.
PROGRAM_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
ROLES = ("framework", "baseline")
# What a `command` may contain, filled in by the harness for each start (docs/contract.md,
# "Servers given as a command"): the contract's command-line options, as values.
PLACEHOLDERS = (
    "python",  # the Python running the harness (its virtualenv's: `{python} -m uvicorn`)
    "host",  # 127.0.0.1
    "port",  # a free loopback port the harness picked; the server must listen on it
    "sink",  # empty, file or mongo
    "sink_path",  # the file sink's file ("" with another sink)
    "mongo_url",  # the mongo sink's (and /gridfs's) database server
    "mongo_db",  # the database in it
    "mongo_w",  # the mongo sink's write concern: 0 or 1
    "mongo_batch",  # the mongo sink's group commit: records per insert_many, at most
    "durable",  # 1: acknowledge a record once on disk (fsync, j: true); else 0
    "files_dir",  # the directory /files/{name} serves ("" when the run has none)
    "memcached",  # HOST:PORT of the memcached /mc/{key} reads
    "workers",  # --process-model workers:N (a command without it runs single only)
    "protocol",  # h1, h1-tls, h2 or h2c (servers.contract.PROTOCOLS)
    "tls_cert",  # the PEM certificate chain a TLS case serves ("" for cleartext)
    "tls_key",  # its PEM private key ("" for cleartext)
    # {secret:NAME}: the harness's environment variable NAME, hidden (***) in all the run
    # writes; it is still on the command's command line, as every filled placeholder is
    "secret",
)
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The sinks a command serves, read from its placeholders when it does not say: with {sink}
# every sink one of whose own placeholders it has too (file: {sink_path}; mongo: {mongo_url},
# or {mongo_db} for a command that reads the URL from contract.MONGO_URL_ENV, which the
# harness sets for every server, as the contenders do).
SINK_PLACEHOLDERS = {"file": ("sink_path",), "mongo": ("mongo_url", "mongo_db")}
BUILTIN = "builtin"


def command_placeholders(command: str) -> set[str]:
    """The `{name}` fields of a command template; ValueError names an unknown one."""
    try:
        fields = [(name, spec) for _, name, spec, _ in string.Formatter().parse(command)]
    except ValueError as error:  # a lone { or }: write {{ and }} for literal braces
        raise ValueError(f"command {command!r}: {error}") from None
    names = {name for name, _ in fields if name is not None}
    for name, spec in fields:
        if name == "secret" and not SECRET_NAME.fullmatch(spec or ""):
            raise ValueError(
                f"command {command!r}: write {{secret:NAME}}, NAME an environment variable's "
                f"name, not {{secret:{spec}}}"
                if spec
                else f"command {command!r}: write "
                "{secret:NAME}, NAME the environment variable that holds the secret"
            )
    unknown = sorted(names - set(PLACEHOLDERS))
    if unknown:
        raise ValueError(
            f"command {command!r}: unknown placeholder {', '.join('{' + n + '}' for n in unknown)}"
            f" (known: {', '.join('{' + n + '}' for n in PLACEHOLDERS)})"
        )
    return names


# env's options that take the next word as their value (GNU coreutils): a directory, a name
ENV_OPTIONS_WITH_VALUE = ("-C", "--chdir", "-u", "--unset")


def command_program(command: str) -> str:
    """The program a command runs (after `env`, its options and its VAR=value words); ""
    if none."""
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    if words[:1] == ["env"]:
        words = _after_env(words[1:])
    return words[0] if words and "{" not in words[0] else ""


def _after_env(words: list[str]) -> list[str]:
    """The words after env's options and assignments: the program and its arguments."""
    while words:
        word = words[0]
        if word == "--":
            return words[1:]
        if word in ("-S", "--split-string") and len(words) > 1:
            return _after_env([*shlex.split(words[1]), *words[2:]])
        if word.startswith("--split-string="):
            return _after_env([*shlex.split(word.partition("=")[2]), *words[1:]])
        skip = 2 if word in ENV_OPTIONS_WITH_VALUE else 1
        if not (word.startswith("-") or "=" in word):
            return words
        words = words[skip:]
    return words


def command_sinks(command: str) -> tuple[str, ...]:
    """The sinks a command can be given, by its placeholders (see SINK_PLACEHOLDERS)."""
    names = command_placeholders(command)
    if "sink" not in names:
        return ("empty",)
    return (
        "empty",
        *(sink for sink, needed in SINK_PLACEHOLDERS.items() if names.intersection(needed)),
    )


@dataclass(frozen=True)
class Framework:
    """One server implementation: its module and the distributions it needs.

    A plugin returns these too (servers.plugins); a server run as a command has kind
    `command`, its command line in `command` and, for `harness bench`, its minimal app's
    in `minimal_command`.
    """

    name: str
    module: str  # python: the module with serve(); node, ruby: the script; command: ""
    distributions: tuple[str, ...]
    loops: tuple[str, ...]  # event loops it can run on; the first is the default
    sinks: tuple[str, ...] = ("empty",)  # the sinks it implements so far
    kind: str = "python"
    role: str = "framework"
    # routes it serves, others "not supported"; None: found by probing the running server
    # (harness.verify.served_routes), for commands that do not say
    routes: tuple[str, ...] | None = contract.ALL_ROUTES
    programs: tuple[str, ...] = ()  # executables it needs on PATH (node, ruby, nginx)
    command: str = ""  # kind command: the command line, with PLACEHOLDERS
    minimal_command: str = ""  # its minimal app for `harness bench` ({host}, {port})
    origin: str = BUILTIN  # builtin, `plugin DIST VERSION`, `--server`, a file's path
    # check name -> why this server answers otherwise, and why it is not ours to fix
    # (harness.verify.MALFORMED_DEVIATIONS has the builtin servers')
    deviations: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # protocols it speaks (servers.contract.PROTOCOLS), h1 always among them
    protocols: tuple[str, ...] = (contract.PROTOCOL_H1,)
    # protocol -> why it does not speak it (`harness list`: "skipped: not supported: …")
    protocol_notes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # route -> why it does not serve it (verify's `not supported (…)`, a case's skip)
    route_notes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # of `protocols`, those taken on trial: a command that did not declare its protocols
    # is started on them and measured only when a probe finds it speaks them
    # (harness.negotiation); the rest it promised, and a probe that fails fails its case
    probed_protocols: tuple[str, ...] = ()

    def why_not(self, protocol: str) -> str:
        """Why this server does not speak `protocol` (one line for `harness list`)."""
        return self.protocol_notes.get(protocol, f"{self.name} has no {protocol} server here")

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", self.name or ""):
            raise ValueError(f"framework name {self.name!r}: letters, digits, _ . - (at most 64)")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.role not in ROLES:
            raise ValueError(f"{self.name}: role {self.role!r} is not one of {', '.join(ROLES)}")
        if not self.loops:
            raise ValueError(f"{self.name}: loops is empty (name at least the one it runs on)")
        unknown_sinks = sorted(set(self.sinks) - set(contract.SINKS))
        if unknown_sinks or "empty" not in self.sinks:
            raise ValueError(
                f"{self.name}: sinks {self.sinks!r} must include empty, of {contract.SINKS}"
            )
        if self.routes is not None and not set(self.routes) <= set(contract.ALL_ROUTES):
            unknown = sorted(set(self.routes) - set(contract.ALL_ROUTES))
            raise ValueError(f"{self.name}: unknown routes {unknown} (of {contract.ALL_ROUTES})")
        if (self.kind == "command") != bool(self.command):
            raise ValueError(f"{self.name}: a command is given exactly when kind is command")
        if self.kind != "command" and self.routes is None:
            raise ValueError(f"{self.name}: only a command's routes may be found by probing")
        unknown_protocols = sorted(set(self.protocols) - set(contract.PROTOCOLS))
        if unknown_protocols or contract.PROTOCOL_H1 not in self.protocols:
            raise ValueError(
                f"{self.name}: protocols {self.protocols!r} must include h1, "
                f"of {contract.PROTOCOLS}"
            )
        if not set(self.probed_protocols) <= set(self.protocols) - {contract.PROTOCOL_H1}:
            raise ValueError(
                f"{self.name}: probed protocols {self.probed_protocols!r} must be of its "
                f"protocols but h1 {self.protocols!r}"
            )
        for template in (self.command, self.minimal_command):
            if template:
                command_placeholders(template)
        if self.kind == "command":
            offered = set(command_sinks(self.command))
            if not set(self.sinks) <= offered:
                raise ValueError(
                    f"{self.name}: sinks {sorted(set(self.sinks) - offered)} need {{sink}} and "
                    "their placeholders in the command (file: {sink_path}; mongo: {mongo_url} or "
                    "{mongo_db})"
                )

    @property
    def telemetry(self) -> bool:
        """Whether it writes the contract's telemetry line (a command does not)."""
        return self.kind != "command"

    @property
    def has_minimal(self) -> bool:
        """Whether `harness bench` has a minimal app to measure it against."""
        if self.minimal_command:
            return True
        minimal = SERVERS_DIR / "minimal" / f"{self.name}_app.py"
        return self.origin == BUILTIN and self.kind == "python" and minimal.is_file()

    def missing(self) -> list[str]:
        """What is not installed (empty when the server can run): distributions, programs."""
        missing = [d for d in self.distributions if _version(d) is None]
        missing += [p for p in self.programs if shutil.which(p, path=PROGRAM_PATH) is None]
        if self.kind == "command" and not missing:
            program = command_program(self.command)
            if program and shutil.which(program, path=PROGRAM_PATH) is None:
                missing.append(program)
        if self.kind == "node" and not (NODE_DIR / "node_modules").is_dir():
            missing.append("servers/baselines/node/node_modules (harness doctor --install)")
        if self.kind == "ruby" and not missing and not _ruby_has("eventmachine"):
            missing.append("ruby-eventmachine")
        return missing

    def serves(self, route: str) -> bool:
        """Whether this server implements `route` (one of contract.ALL_ROUTES); a server
        whose routes are found by probing is taken at its word until probed."""
        return self.routes is None or route in self.routes

    def available(self) -> bool:
        return not self.missing()

    def versions(self) -> dict[str, str]:
        """Installed versions of what it runs on (distributions, uvloop, programs)."""
        names = self.distributions + (("uvloop",) if "uvloop" in self.loops else ())
        found = {name: _version(name) for name in names}
        found.update({program: _program_version(program) for program in self.programs})
        return {name: v for name, v in found.items() if v is not None}

    def usable_loops(self) -> tuple[str, ...]:
        return tuple(
            loop for loop in self.loops if loop != "uvloop" or _version("uvloop") is not None
        )


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def _program_version(program: str) -> str | None:
    """The version `program -v` prints (nginx writes it to stderr); None when not installed."""
    path = shutil.which(program, path=PROGRAM_PATH)
    if path is None:
        return None
    flag = "-v" if program in ("nginx", "ruby") else "--version"
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"\d+(?:\.\d+)+", done.stdout or done.stderr)
    return found.group(0) if found else None


@cache
def _ruby_has(gem: str) -> bool:
    try:
        done = subprocess.run(["ruby", "-e", f"require '{gem}'"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _http11_only(server: str) -> dict[str, str]:
    """The protocol notes of a server that speaks HTTP/1.1 alone (cleartext and TLS)."""
    why = f"{server} speaks HTTP/1.1 only"
    return {contract.PROTOCOL_H2: why, contract.PROTOCOL_H2C: why}


# Why node-express has no HTTP/2 (node-http, on the same Node, has).
EXPRESS_NO_HTTP2 = (
    "Express 4 gives each request http.IncomingMessage's prototype, which Node's HTTP/2 "
    "compatibility request is not built on: its first read throws and ends the process"
)

# The boards' workloads nginx and EventMachine serve, and why not the others.
BASELINE_WORKLOADS = (
    contract.ROUTE_JSON,
    contract.ROUTE_PLAINTEXT,
    contract.ROUTE_JSON_COMP,
    contract.ROUTE_BODY_10K,
)
NGINX_ROUTE_NOTES = {
    contract.ROUTE_DELAY_PREFIX: "stock nginx has no timer a location can wait on "
    "(echo_sleep is a third-party module, njs and Lua are not built in)",
    contract.ROUTE_UPLOAD: "stock nginx cannot answer with a body's byte count "
    "(it takes a module: njs, Lua)",
}
EVENTMACHINE_ROUTE_NOTES = {
    contract.ROUTE_DELAY_PREFIX: "this baseline answers each request as its bytes are "
    "parsed, in order; a reply held on a timer would need a response queue it does not have",
    contract.ROUTE_UPLOAD: "this baseline's parser reads and drops bodies of a stated "
    "length and does not decode chunked ones",
}

FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "gevent",
            "servers.frameworks.gevent",
            ("gevent", "wsproto", "pymongo"),
            ("gevent",),
            ("empty", "file", "mongo"),
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes=_http11_only("gevent.pywsgi"),
        ),
        Framework(
            "eventlet",
            "servers.frameworks.eventlet",
            ("eventlet", "wsproto", "pymongo"),
            ("eventlet",),
            ("empty", "file", "mongo"),
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes=_http11_only("eventlet.wsgi"),
        ),
        Framework(
            "tornado",
            "servers.frameworks.tornado",
            ("tornado", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes=_http11_only("tornado.httpserver"),
        ),
        Framework(
            "twisted",
            "servers.frameworks.twisted",
            ("twisted", "autobahn", "pymongo"),
            ("epoll",),
            ("empty", "file", "mongo"),
            protocols=contract.PROTOCOLS,
        ),
        Framework(
            "aiohttp",
            "servers.frameworks.aiohttp",
            ("aiohttp", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes=_http11_only("aiohttp.web"),
        ),
        # -- baselines: measured in the same run, so results carry a ratio to nginx ------
        Framework(
            "nginx",
            "servers.baselines.nginx",
            (),
            ("nginx",),
            ("empty",),
            kind="nginx",
            role="baseline",
            routes=(contract.ROUTE_TEXT, contract.ROUTE_FILES_PREFIX, *BASELINE_WORKLOADS),
            route_notes=NGINX_ROUTE_NOTES,
            programs=("nginx",),
            protocols=contract.PROTOCOLS,
        ),
        *(
            # one server.js; the variant (core http or Express routing) is its first argument,
            # and --protocol picks its listener (servers/baselines/node/protocols.js)
            Framework(
                variant,
                str(NODE_DIR / "server.js"),
                (),
                ("libuv",),
                ("empty", "file", "mongo"),
                kind="node",
                role="baseline",
                programs=("node",),
                protocols=protocols,
                protocol_notes=notes,
            )
            for variant, protocols, notes in (
                ("node-http", contract.PROTOCOLS, {}),
                (
                    "node-express",
                    (contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
                    dict.fromkeys((contract.PROTOCOL_H2, contract.PROTOCOL_H2C), EXPRESS_NO_HTTP2),
                ),
            )
        ),
        Framework(
            "eventmachine",
            str(EVENTMACHINE_SCRIPT),
            (),
            ("eventmachine",),
            ("empty",),
            kind="ruby",
            role="baseline",
            routes=(contract.ROUTE_TEXT, contract.ROUTE_COUNTER, *BASELINE_WORKLOADS),
            route_notes=EVENTMACHINE_ROUTE_NOTES,
            programs=("ruby",),
            # start_tls in post_init, TLS 1.3 only; EventMachine's TLS has no ALPN, so a
            # client offering http/1.1 gets no ALPN answer (and speaks HTTP/1.1 anyway)
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes={
                contract.PROTOCOL_H2: "EventMachine has no HTTP/2, and its TLS no ALPN",
                contract.PROTOCOL_H2C: "EventMachine has no HTTP/2",
            },
        ),
    )
}


def register(framework: Framework) -> None:
    """Add a plugin's or a command's entry; ValueError when its name is taken."""
    taken = FRAMEWORKS.get(framework.name)
    if taken is not None:
        raise ValueError(
            f"framework {framework.name} ({framework.origin}) is {taken.origin}'s already"
        )
    FRAMEWORKS[framework.name] = framework


def full_contract_servers() -> list[str]:
    """Servers that implement every route and sink kind: the contract suite runs on these."""
    return [
        name
        for name, f in FRAMEWORKS.items()
        if f.routes is not None and set(f.routes) == set(contract.ALL_ROUTES)
    ]


def baselines() -> list[str]:
    return [name for name, f in FRAMEWORKS.items() if f.role == "baseline"]

"""Choosing frameworks by name: `all`, or a comma-separated list checked against the registry.

The registry (servers.FRAMEWORKS) holds the builtin servers, the plugins'
(servers.plugins, loaded by `load_registry`) and the servers the user gives as commands:
`--server NAME=COMMAND`, a servers file (`--servers FILE.toml`) or a profile's `[servers]`
table, all in one shape:

    [servers]
    myapp = "uvicorn myapp:app --host {host} --port {port}"

    [servers.flaskapp]
    command = "gunicorn -k gevent -b {host}:{port} flaskapp:app"
    minimal = "gunicorn -k gevent -b {host}:{port} hello:app"  # for harness bench
    role = "framework"  # or baseline
    routes = ["/", "/log"]  # optional: else probed (a route answered 404 is not served)
    sinks = ["empty", "file"]  # optional: else read from the placeholders
    deviations = { oversized-headers = "why it answers otherwise" }
    protocols = ["h1", "h1-tls", "h2"]  # optional: else h1 and the rest probed (see below)

The protocols a command speaks (servers.contract.PROTOCOLS; `command_protocols`): h1
always; h1-tls too when its command has {tls_cert} and {tls_key} (filled with "" on a
cleartext case, so the command must serve h1 when they are empty, as uvicorn's
`--ssl-certfile {tls_cert} --ssl-keyfile {tls_key}` does). HTTP/2 is what a server
negotiates, so a command that does not declare its protocols is taken on trial for it
(`Framework.probed_protocols`, harness.negotiation): h2 when it has {tls_cert} and
{tls_key}, h2c always; asked for one, it is started and probed (ALPN h2 offered; the h2
preface in the clear) and measured only when it answers so, else skipped with what the
probe found. A `protocols` key declares exactly what it speaks (h1 always): h1-tls and h2
need {tls_cert} and {tls_key}; a declared protocol the server then does not speak fails
its case. {protocol} is offered (h1, h1-tls, h2 or h2c) for a command that must be told
which one to speak, never required.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from model.errors import UserError
from servers import FRAMEWORKS, Framework, command_placeholders, command_sinks, register
from servers.contract import (
    PROTOCOL_H1,
    PROTOCOL_H1_TLS,
    PROTOCOL_H2,
    PROTOCOL_H2C,
    PROTOCOLS,
)
from servers.plugins import PLUGIN_PROBLEMS, load_plugins

# What a server table may say besides its command.
SERVER_TABLE_KEYS = (
    "command",
    "minimal",
    "role",
    "routes",
    "sinks",
    "deviations",
    "loops",
    "protocols",
)
COMMAND_LOOPS = ("unknown",)  # a command's event loop is its own business
# the placeholders a command needs to speak each protocol (see the module docstring)
PROTOCOL_PLACEHOLDERS = {
    PROTOCOL_H1: (),
    PROTOCOL_H1_TLS: ("tls_cert", "tls_key"),
    PROTOCOL_H2: ("tls_cert", "tls_key"),
    PROTOCOL_H2C: (),
}
# what a command that does not declare its protocols is taken on trial for: a probe of
# the started server says whether it speaks them (harness.negotiation)
NEGOTIATED_PROTOCOLS = (PROTOCOL_H2, PROTOCOL_H2C)


def command_protocols(
    name: str, command: str, declared: Iterable[str] | None = None
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The protocols a command is started on and, for each other one, why not (`harness
    list`).

    Without `declared`: h1, and h1-tls and h2 when the command has {tls_cert} and
    {tls_key}, and h2c (h2 and h2c on trial: `probed_protocols`). With it: those declared
    (h1 always), each checked to have its placeholders (PROTOCOL_PLACEHOLDERS);
    ValueError names what is missing or unknown.
    """
    names = command_placeholders(command)
    if declared is None:
        wanted = [p for p in PROTOCOLS if set(PROTOCOL_PLACEHOLDERS[p]) <= names]
    else:
        wanted = list(declared)
        unknown = sorted(set(wanted) - set(PROTOCOLS))
        if unknown:
            raise ValueError(f"protocols {unknown} are not of {', '.join(PROTOCOLS)}")
        for protocol in wanted:
            missing = [p for p in PROTOCOL_PLACEHOLDERS[protocol] if p not in names]
            if missing:
                needed = ", ".join("{" + p + "}" for p in missing)
                raise ValueError(f"protocol {protocol} needs {needed} in the command")
    protocols = tuple(p for p in PROTOCOLS if p == PROTOCOL_H1 or p in wanted)
    notes = {}
    for protocol in PROTOCOLS:
        if protocol in protocols:
            continue
        if declared is not None:
            notes[protocol] = f"{name}'s `protocols` does not list {protocol}"
        else:
            needed = ", ".join("{" + p + "}" for p in PROTOCOL_PLACEHOLDERS[protocol])
            notes[protocol] = f"{name}'s command does not declare {protocol} (it needs {needed})"
    return protocols, notes


def probed_protocols(
    protocols: Iterable[str], declared: Iterable[str] | None = None
) -> tuple[str, ...]:
    """Of a command's `protocols`, those it is taken on trial for: NEGOTIATED_PROTOCOLS
    when it did not declare any, none when it did."""
    if declared is not None:
        return ()
    return tuple(p for p in protocols if p in NEGOTIATED_PROTOCOLS)


def load_registry() -> None:
    """Add the installed plugins' frameworks to the registry (once per process)."""
    load_plugins()


def command_framework(name: str, spec: str | Mapping[str, Any], origin: str) -> Framework:
    """A registry entry for a server given as a command (`spec`: the command, or a table
    with `command` and the optional keys of SERVER_TABLE_KEYS); UserError names a fault."""
    table: Mapping[str, Any] = {"command": spec} if isinstance(spec, str) else spec
    if not isinstance(table, Mapping):
        raise UserError(f"server {name} ({origin}): give a command string or a table")
    unknown = sorted(set(table) - set(SERVER_TABLE_KEYS))
    if unknown or not isinstance(table.get("command"), str) or not table["command"].strip():
        raise UserError(
            f"server {name} ({origin}): needs a command string"
            + (
                f"; unknown keys {', '.join(unknown)} (known: {', '.join(SERVER_TABLE_KEYS)})"
                if unknown
                else ""
            )
        )
    command = table["command"].strip()
    try:
        routes = table.get("routes")
        declared = table.get("protocols")
        if declared is not None and (
            isinstance(declared, str) or not all(isinstance(p, str) for p in declared)
        ):
            raise ValueError(f"protocols must be a list of names, not {declared!r}")
        protocols, notes = command_protocols(name, command, declared)
        return Framework(
            name,
            "",
            (),
            tuple(table.get("loops", COMMAND_LOOPS)),
            tuple(table["sinks"]) if "sinks" in table else command_sinks(command),
            kind="command",
            role=table.get("role", "framework"),
            routes=tuple(routes) if routes is not None else None,
            command=command,
            minimal_command=str(table.get("minimal", "")),
            origin=origin,
            deviations=dict(table.get("deviations", {})),
            protocols=protocols,
            protocol_notes=notes,
            probed_protocols=probed_protocols(protocols, declared),
        )
    except (ValueError, TypeError) as error:
        raise UserError(f"server {name} ({origin}): {error}") from None


def parse_server_option(option: str) -> tuple[str, str]:
    """`NAME=COMMAND` as (name, command); UserError when there is no `=`."""
    name, sep, command = option.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise UserError(
            f"--server {option!r} is not NAME=COMMAND "
            "(e.g. 'myapp=uvicorn myapp:app --host {host} --port {port}')"
        )
    return name.strip(), command.strip()


def read_servers_file(path: Path) -> dict[str, Any]:
    """The `[servers]` table of a TOML file; UserError when unreadable or absent."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise UserError(f"servers file {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"servers file {path}: {error}") from None
    servers = data.get("servers")
    if not isinstance(servers, dict) or not servers:
        raise UserError(f"servers file {path}: no [servers] table")
    return servers


def register_servers(
    options: Iterable[str] = (),
    servers_file: Path | None = None,
    table: Mapping[str, Any] | None = None,
    table_origin: str = "profile",
) -> list[str]:
    """Register the servers given as commands (`--server` options, a servers file, a
    profile's table); the names added. A name already registered is refused."""
    given: list[tuple[str, str | Mapping[str, Any], str]] = []
    for name, spec in (table or {}).items():
        given.append((name, spec, table_origin))
    if servers_file is not None:
        for name, spec in read_servers_file(servers_file).items():
            given.append((name, spec, str(servers_file)))
    for option in options:
        name, command = parse_server_option(option)
        given.append((name, command, "--server"))
    added = []
    for name, spec, origin in given:
        framework = command_framework(name, spec, origin)
        existing = FRAMEWORKS.get(name)
        if existing is not None and existing.kind == "command" and existing == framework:
            continue  # the same server given again (a run's rounds, in-process callers)
        try:
            register(framework)
        except ValueError as error:
            raise UserError(str(error)) from None
        added.append(name)
    return added


def _installed(roles: Sequence[str]) -> list[str]:
    """The servers of these roles that can run here, in FRAMEWORKS' order."""
    return [name for name, f in FRAMEWORKS.items() if f.role in roles and f.available()]


def server_option_names(options: Iterable[str]) -> list[str]:
    """The names of the servers given with `--server NAME=COMMAND`."""
    return [parse_server_option(option)[0] for option in options]


def select_frameworks(spec: str, also: Sequence[str] = ()) -> list[str]:
    """`all` (every framework and baseline installed here, plugins' and commands' too),
    `baselines` (nginx, Node.js, EventMachine), or `a,b` (which may include `baselines`);
    an unknown name lists the valid ones. The servers `also` (those given with `--server`:
    "also compare") are chosen whatever `spec` says, after its names; one that cannot run
    here is refused with what it misses, never left out unsaid."""
    if spec.strip() in ("all", "baselines"):
        wanted = ("framework", "baseline") if spec.strip() == "all" else ("baseline",)
        names = _installed(wanted)
        if not names and not also:
            raise UserError(f"nothing of {spec.strip()} is installed: harness doctor --install")
    else:
        names = []
        for name in (part.strip() for part in spec.split(",")):
            if name == "baselines":
                names += _installed(("baseline",))
            elif name:
                names.append(name)
    names += [name for name in also if name not in names]
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown or not names:
        problems = f" (plugins left out: {'; '.join(PLUGIN_PROBLEMS)})" if PLUGIN_PROBLEMS else ""
        raise UserError(
            f"unknown framework {', '.join(unknown) or repr(spec)}: "
            f"choose from all, baselines, {', '.join(FRAMEWORKS)}, "
            f"or give one with --server NAME=COMMAND{problems}"
        )
    missing = [
        f"{n} (missing {', '.join(FRAMEWORKS[n].missing())})"
        for n in names
        if not FRAMEWORKS[n].available()
    ]
    if missing:
        raise UserError(f"not installed: {', '.join(missing)}")
    return names

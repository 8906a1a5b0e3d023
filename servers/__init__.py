"""Framework servers behind one wire contract (see servers/contract.py).

The registry is an explicit dict. Framework modules are imported only by the server
process that runs them (gevent and eventlet monkey-patch at import), never by the harness.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from servers import contract

SERVERS_DIR = Path(__file__).resolve().parent
NODE_DIR = SERVERS_DIR / "baselines" / "node"
EVENTMACHINE_SCRIPT = SERVERS_DIR / "baselines" / "eventmachine" / "server.rb"

# What `kind` means: how `python -m servers NAME` runs the server.
#   python: imports `module` and calls its serve(); node/ruby: execs the program on the
#   script `module` with the same arguments; nginx: servers.baselines.nginx renders a config and
#   runs nginx, writing the telemetry lines for it.
KINDS = ("python", "node", "ruby", "nginx")
# Programs are looked up in sbin too: nginx lives in /usr/sbin, often outside a user's PATH.
PROGRAM_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
ROLES = ("framework", "baseline")


@dataclass(frozen=True)
class Framework:
    """One server implementation: its module and the distributions it needs."""

    name: str
    module: str
    distributions: tuple[str, ...]
    loops: tuple[str, ...]  # event loops it can run on; the first is the default
    sinks: tuple[str, ...] = ("empty",)  # the sinks it implements so far
    kind: str = "python"
    role: str = "framework"
    routes: tuple[str, ...] = contract.ALL_ROUTES  # routes it serves; others "not supported"
    programs: tuple[str, ...] = ()  # executables it needs on PATH (node, ruby, nginx)

    def missing(self) -> list[str]:
        """What is not installed (empty when the server can run): distributions, programs."""
        missing = [d for d in self.distributions if _version(d) is None]
        missing += [p for p in self.programs if shutil.which(p, path=PROGRAM_PATH) is None]
        if self.kind == "node" and not (NODE_DIR / "node_modules").is_dir():
            missing.append("servers/baselines/node/node_modules (harness doctor --install)")
        if self.kind == "ruby" and not missing and not _ruby_has("eventmachine"):
            missing.append("ruby-eventmachine")
        return missing

    def serves(self, route: str) -> bool:
        """Whether this server implements `route` (one of contract.ALL_ROUTES)."""
        return route in self.routes

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


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "gevent",
            "servers.frameworks.gevent",
            ("gevent", "wsproto", "pymongo"),
            ("gevent",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "eventlet",
            "servers.frameworks.eventlet",
            ("eventlet", "wsproto", "pymongo"),
            ("eventlet",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "tornado",
            "servers.frameworks.tornado",
            ("tornado", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "twisted",
            "servers.frameworks.twisted",
            ("twisted", "autobahn", "pymongo"),
            ("epoll",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "aiohttp",
            "servers.frameworks.aiohttp",
            ("aiohttp", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
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
            routes=(contract.ROUTE_TEXT, contract.ROUTE_FILES_PREFIX),
            programs=("nginx",),
        ),
        *(
            # one server.js; the variant (core http or Express routing) is its first argument
            Framework(
                variant,
                str(NODE_DIR / "server.js"),
                (),
                ("libuv",),
                ("empty", "file", "mongo"),
                kind="node",
                role="baseline",
                programs=("node",),
            )
            for variant in ("node-http", "node-express")
        ),
        Framework(
            "eventmachine",
            str(EVENTMACHINE_SCRIPT),
            (),
            ("eventmachine",),
            ("empty",),
            kind="ruby",
            role="baseline",
            routes=(contract.ROUTE_TEXT, contract.ROUTE_COUNTER),
            programs=("ruby",),
        ),
    )
}


def full_contract_servers() -> list[str]:
    """Servers that implement every route and sink kind: the contract suite runs on these."""
    return [name for name, f in FRAMEWORKS.items() if set(f.routes) == set(contract.ALL_ROUTES)]


def baselines() -> list[str]:
    return [name for name, f in FRAMEWORKS.items() if f.role == "baseline"]

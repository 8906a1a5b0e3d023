"""The system tools the harness runs: where each is, its version, the package that has it.

The table is derived, not kept by hand: every registered driver declares its tool and
package (`drivers.DRIVERS`), and the services and baselines add their own programs below.
A package is a Debian one (apt-get), or `cargo:<crate>@<version>` for a tool built from
crates.io into the harness's cache (oha); only that pinned build is used, never another
version found on PATH. FerretDB is not here: it is built from the Go module proxy
(harness.services).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from drivers import driver_classes
from drivers.base import cargo_binary, cargo_crate
from servers import PROGRAM_PATH


@dataclass(frozen=True)
class Tool:
    """A system tool the harness drives, the Debian package that has it, how to ask its version."""

    name: str
    package: str
    version_args: tuple[str, ...]
    purpose: str = ""  # what the harness runs it for (`harness doctor --install` says why)

    @property
    def crate(self) -> tuple[str, str] | None:
        """(crate, version) when the tool is built with cargo; None for a Debian package."""
        return cargo_crate(self.package)


@dataclass(frozen=True)
class ToolStatus:
    name: str
    package: str
    path: str | None
    version: str | None


# Programs the harness needs beside the drivers' tools.
SERVICE_TOOLS = (
    Tool("nginx", "nginx", ("-v",), "the nginx baseline and the lb: process models"),
    Tool("memcached", "memcached", ("-V",), "the /mc routes' backend"),
    Tool("taskset", "util-linux", ("--version",), "every server and driver is pinned"),
    Tool("node", "nodejs", ("--version",), "the Node http and Express baselines"),
    Tool("ruby", "ruby-eventmachine", ("-v",), "the EventMachine baseline"),
    Tool("postgres", "postgresql", ("--version",), "FerretDB's backend (the mongo sink)"),
    Tool("chromium", "chromium", ("--version",), "report.html checked headless (tests)"),
    Tool("perf", "linux-perf", ("--version",), "--cpu-profile: nginx, Node and Ruby sampled"),
)


def driver_tools() -> list[Tool]:
    """The tools of the registered drivers that come from a package (not ours)."""
    return [
        Tool(cls.tool, cls.package, cls.tool_version_args, f"the {name} driver")
        for name, cls in driver_classes().items()
        if cls.package is not None
    ]


TOOLS: dict[str, Tool] = {tool.name: tool for tool in (*driver_tools(), *SERVICE_TOOLS)}
_VERSION = re.compile(r"\d+(?:\.\d+)+[\w.-]*")


POSTGRES_DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"
POSTGRES_PROGRAMS = ("initdb", "postgres", "psql")


def postgres_bin_dir() -> Path | None:
    """The directory holding initdb, postgres and psql: Debian's newest major version,
    else wherever `postgres` is on PATH; None when PostgreSQL is not installed."""

    def major(path: Path) -> int:
        return int(path.parent.name) if path.parent.name.isdigit() else -1

    candidates = sorted(
        Path("/").glob(POSTGRES_DEBIAN_BIN_GLOB.lstrip("/")), key=major, reverse=True
    )
    on_path = shutil.which("postgres")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all((directory / program).is_file() for program in POSTGRES_PROGRAMS):
            return directory
    return None


def tool_path(name: str) -> str | None:
    """Where `name` is: a cargo-built tool's pinned build in the cache; `postgres` in
    Debian's /usr/lib/postgresql/<major>/bin, outside PATH (postgres_bin_dir); else
    on PATH, looking in sbin too (nginx lives there)."""
    tool = TOOLS.get(name)
    if tool is not None and tool.crate is not None:
        binary = cargo_binary(tool.name, tool.package)
        return str(binary) if binary.is_file() else None
    if name == "postgres":
        directory = postgres_bin_dir()
        return str(directory / "postgres") if directory is not None else None
    return shutil.which(name, path=PROGRAM_PATH)


def tool_status(tool: Tool) -> ToolStatus:
    """Where `tool` is and the version it reports (None for both when it is missing)."""
    path = tool_path(tool.name)
    version = None
    if path:
        try:
            result = subprocess.run(
                [path, *tool.version_args], capture_output=True, text=True, timeout=10
            )
            match = _VERSION.search(result.stdout + result.stderr)
            version = match.group(0) if match else "unknown"
        except (OSError, subprocess.TimeoutExpired):
            version = "unknown"
    return ToolStatus(tool.name, tool.package, path, version)

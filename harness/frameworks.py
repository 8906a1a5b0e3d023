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
    protocols = ["h1", "h1-tls", "h2"]  # optional: else read from the placeholders

The protocols a command speaks (servers.contract.PROTOCOLS; `command_protocols`): h1
always; h1-tls too when its command has {tls_cert} and {tls_key} (filled with "" on a
cleartext case, so the command must serve h1 when they are empty, as uvicorn's
`--ssl-certfile {tls_cert} --ssl-keyfile {tls_key}` does). A `protocols` key may declare
more: h2 needs {tls_cert}, {tls_key} and {protocol}; h2c needs {protocol} (the command
must know which one to speak). `--server NAME=COMMAND` reads them from the placeholders.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
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
    PROTOCOL_H2: ("tls_cert", "tls_key", "protocol"),
    PROTOCOL_H2C: ("protocol",),
}


def command_protocols(
    name: str, command: str, declared: Iterable[str] | None = None
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The protocols a command speaks and, for each other one, why not (`harness list`).

    Without `declared`: h1, and h1-tls when the command has {tls_cert} and {tls_key}.
    With it: those declared (h1 always), each checked to have its placeholders
    (PROTOCOL_PLACEHOLDERS); ValueError names what is missing or unknown.
    """
    names = command_placeholders(command)
    if declared is None:
        wanted = [PROTOCOL_H1_TLS] if {"tls_cert", "tls_key"} <= names else []
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
        needed = ", ".join("{" + p + "}" for p in PROTOCOL_PLACEHOLDERS[protocol])
        if protocol == PROTOCOL_H1_TLS or declared is not None:
            notes[protocol] = f"{name}'s command does not declare {protocol} (it needs {needed})"
        else:
            notes[protocol] = (
                f"{name} does not declare {protocol} (a servers file's `protocols`, "
                f"with {needed} in its command)"
            )
    return protocols, notes


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


def select_frameworks(spec: str) -> list[str]:
    """`all` (every framework and baseline installed here, plugins' and commands' too),
    `baselines` (nginx, Node.js, EventMachine), or `a,b` (which may include `baselines`);
    an unknown name lists the valid ones."""
    if spec.strip() in ("all", "baselines"):
        wanted = ("framework", "baseline") if spec.strip() == "all" else ("baseline",)
        available = [name for name, f in FRAMEWORKS.items() if f.available() and f.role in wanted]
        if not available:
            raise UserError(f"nothing of {spec.strip()} is installed: harness doctor --install")
        return available
    names: list[str] = []
    for name in (part.strip() for part in spec.split(",")):
        if name == "baselines":
            names += [n for n, f in FRAMEWORKS.items() if f.role == "baseline" and f.available()]
        elif name:
            names.append(name)
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

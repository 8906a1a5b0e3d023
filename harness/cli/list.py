"""`harness list`: frameworks and baselines (installed or not, and where each came from:
builtin, a plugin package, a --server command or a servers file), or the scenarios.

Each server's protocols are listed; `--protocol h1-tls,h2` adds a column per protocol
asked: `yes`, or `skipped: not supported: <why>` as a run would record the case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from harness.cli.options import PROTOCOL_OPTION, SERVER_OPTION, SERVERS_FILE_OPTION, console
from model.errors import UserError
from servers import FRAMEWORKS, contract

PROBED = "probed"  # a command's routes: found by verify's probes once it runs


def list_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    scenarios: bool = typer.Option(False, "--scenarios", help="List the scenarios instead."),
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    protocol: str = PROTOCOL_OPTION,
) -> None:
    """Frameworks and baselines: where each came from, installed here or not, versions,
    loops, routes served, protocols spoken."""
    from harness.frameworks import register_servers
    from harness.profile import parse_protocols
    from servers.plugins import PLUGIN_PROBLEMS

    register_servers(servers, servers_file)
    try:
        asked = parse_protocols(protocol) if protocol else ()
    except ValueError as error:
        raise UserError(f"--protocol: {error}") from None
    if scenarios:
        from model.scenarios import SCENARIOS

        table = Table("scenario", "description")
        for scenario in SCENARIOS.values():
            table.add_row(scenario.name, scenario.description)
        console.print(table)
        return
    rows = [
        {
            "framework": name,
            "role": framework.role,
            "origin": framework.origin,
            "kind": framework.kind,
            "command": framework.command or None,
            "available": framework.available(),
            "missing": framework.missing(),
            "versions": framework.versions(),
            "loops": list(framework.usable_loops()),
            "routes": list(framework.routes) if framework.routes is not None else PROBED,
            "sinks": list(framework.sinks),
            "protocols": list(framework.protocols),
            # of those, the ones it is started on and probed for (harness.negotiation)
            "probed_protocols": list(framework.probed_protocols),
            # every other protocol, as a run records its case
            "not_supported": {
                p: f"skipped: not supported: {framework.why_not(p)}"
                for p in contract.PROTOCOLS
                if p not in framework.protocols
            },
        }
        for name, framework in FRAMEWORKS.items()
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        for problem in PLUGIN_PROBLEMS:
            print(f"harness: broken plugin, not loaded: {problem}", file=sys.stderr)
        return
    table = Table("framework", "role", "from", "available", "versions", "loops", "routes")
    table.add_column("protocols")
    for name in asked:
        table.add_column(name)
    for row in rows:
        available = "yes" if row["available"] else f"no (missing {', '.join(row['missing'])})"
        versions = ", ".join(f"{k} {v}" for k, v in row["versions"].items())
        routes = row["routes"]
        if routes != PROBED:
            routes = "all" if len(routes) == len(contract.ALL_ROUTES) else " ".join(routes)
        table.add_row(
            row["framework"],
            row["role"],
            row["origin"],
            available,
            versions,
            ", ".join(row["loops"]),
            routes,
            ", ".join(p + " (probed)" * (p in row["probed_protocols"]) for p in row["protocols"]),
            *(row["not_supported"].get(name, "yes") for name in asked),
        )
    console.print(table)
    for problem in PLUGIN_PROBLEMS:
        console.print(f"[red]broken plugin, not loaded:[/] {problem}")

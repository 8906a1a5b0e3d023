"""`harness list`: frameworks and baselines (installed or not, and where each came from:
builtin, a plugin package, a --server command or a servers file), or the scenarios."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from harness.cli.options import SERVER_OPTION, SERVERS_FILE_OPTION, console
from servers import FRAMEWORKS, contract

PROBED = "probed"  # a command's routes: found by verify's probes once it runs


def list_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    scenarios: bool = typer.Option(False, "--scenarios", help="List the scenarios instead."),
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
) -> None:
    """Frameworks and baselines: where each came from, installed here or not, versions,
    loops, routes served."""
    from harness.frameworks import register_servers
    from servers.plugins import PLUGIN_PROBLEMS

    register_servers(servers, servers_file)
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
        }
        for name, framework in FRAMEWORKS.items()
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        for problem in PLUGIN_PROBLEMS:
            print(f"harness: plugin not loaded: {problem}", file=sys.stderr)
        return
    table = Table("framework", "role", "from", "available", "versions", "loops", "routes")
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
        )
    console.print(table)
    for problem in PLUGIN_PROBLEMS:
        console.print(f"[red]plugin not loaded:[/] {problem}")

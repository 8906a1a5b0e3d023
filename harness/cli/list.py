"""`harness list`: frameworks and baselines (installed or not), or the scenarios."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from harness.cli.options import console
from servers import FRAMEWORKS, contract


def list_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    scenarios: bool = typer.Option(False, "--scenarios", help="List the scenarios instead."),
) -> None:
    """Frameworks and baselines: installed here or not, versions, loops, routes served."""
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
            "available": framework.available(),
            "missing": framework.missing(),
            "versions": framework.versions(),
            "loops": list(framework.usable_loops()),
            "routes": list(framework.routes),
            "sinks": list(framework.sinks),
        }
        for name, framework in FRAMEWORKS.items()
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("framework", "role", "available", "versions", "loops", "routes")
    for row in rows:
        available = "yes" if row["available"] else f"no (missing {', '.join(row['missing'])})"
        versions = ", ".join(f"{k} {v}" for k, v in row["versions"].items())
        routes = (
            "all" if len(row["routes"]) == len(contract.ALL_ROUTES) else " ".join(row["routes"])
        )
        table.add_row(
            row["framework"], row["role"], available, versions, ", ".join(row["loops"]), routes
        )
    console.print(table)

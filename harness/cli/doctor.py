"""`harness doctor`: the tools found (with versions), FerretDB, and the host's limits."""

from __future__ import annotations

import json
import sys

import typer
from rich.table import Table

from harness.cli.options import console


def doctor_command(
    install: bool = typer.Option(
        False,
        "--install",
        help="Install what is missing: apt-get packages, oha (cargo, minutes), FerretDB (go).",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="With --install: print what it would install, why and how long, install nothing.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Load tools found (with versions) and the limits that bound a run on this machine."""
    from harness.cli.clean import leftovers_table
    from harness.doctor import doctor_report, install_missing, missing_steps

    def say(line: str) -> None:  # the plan and the progress, as they come; stderr under --json
        print(line, file=sys.stderr if as_json else sys.stdout, flush=True)

    if install and dry_run:
        missing_steps(say=say)
        return
    if install:
        installed = install_missing(say=say)
        if installed:
            say(f"installed: {', '.join(installed)}")
    report = doctor_report()
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table("tool", "package", "version", "path")
    ferretdb = report["ferretdb"]
    for tool in report["tools"].values():  # type: ignore[union-attr]
        table.add_row(
            tool["name"], tool["package"], tool["version"] or "[red]missing[/]", tool["path"] or ""
        )
    table.add_row(
        "ferretdb", "go module", ferretdb["version"] or "[red]missing[/]", ferretdb["path"] or ""
    )  # type: ignore[index]
    console.print(table)
    probe = ferretdb["w0_probe"]  # type: ignore[index]
    if probe:
        console.print(
            f"FerretDB with w: 0 (unacknowledged writes): {probe['stored']} of {probe['sent']} "
            f"stored after the client disconnected — {probe['lost']} lost"
            + (" (use --mongo-w 1, or --mongo-url to a real MongoDB)" if probe["lost"] else "")
        )
    host = report["host"]
    limits = Table("host fact", "value")
    for key, value in host.items():  # type: ignore[union-attr]
        limits.add_row(key, str(value))
    console.print(limits)
    for problem in report["broken_plugins"]:  # type: ignore[union-attr]
        console.print(f"[red]broken plugin, not loaded:[/] {problem}")
    if report["leftovers"]:
        console.print("[yellow]left by killed runs[/] (`harness clean` removes them):")
        console.print(leftovers_table(report["leftovers"]))  # type: ignore[arg-type]

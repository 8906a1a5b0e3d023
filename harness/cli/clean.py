"""`harness clean`: remove what killed runs left (harness.services.leftovers): their temporary
directories, and the PostgreSQL, FerretDB or memcached still running from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.options import console
from model.errors import UserError


def leftovers_table(records: list[dict[str, Any]]) -> Table:
    """One row per leftover (`Leftover.record()`): kind, size, owner, directory, and the
    processes running from it."""
    table = Table("kind", "size", "owner pid (gone)", "directory", "processes running from it")
    for record in records:
        processes = "\n".join(escape(f"{p['pid']} {p['command']}") for p in record["processes"])
        table.add_row(
            record["kind"],
            f"{record['size_bytes'] / 1e6:.1f} MB",
            str(record["owner_pid"]),
            escape(record["path"]),
            processes,
        )
    return table


def clean_command(
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List what would be stopped and removed; change nothing."
    ),
    directory: list[Path] = typer.Option(
        [],
        "--dir",
        help="Look in this directory (repeatable; default: the system's temporary directory).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Stop the services and remove the temporary directories of runs that were killed
    (whose owner process is gone); another run's, still going, are never touched."""
    from harness.cgroups.groups import leftover_groups, remove_leftover_groups
    from harness.services.leftovers import clean_leftovers, find_leftovers

    leftovers = find_leftovers(directory or None)
    groups = leftover_groups()  # killed runs' cgroups (harness.cgroups), in every hierarchy
    problems = [] if dry_run else clean_leftovers(leftovers) + remove_leftover_groups(groups)
    if as_json:
        print(
            json.dumps(
                {
                    "dry_run": dry_run,
                    "leftovers": [leftover.record() for leftover in leftovers],
                    "cgroups": [str(group) for group in groups],
                    "problems": problems,
                },
                indent=2,
            )
        )
        if problems:
            raise UserError("could not remove: " + "; ".join(problems))
        return
    if groups:
        verb = "would remove" if dry_run else "removed"
        console.print(f"{verb} {len(groups)} cgroup directories of killed runs")
    if not leftovers:
        console.print(
            "nothing else left by killed runs" if groups else "nothing left by killed runs"
        )
    else:
        console.print(leftovers_table([leftover.record() for leftover in leftovers]))
        total_mb = sum(leftover.size_bytes for leftover in leftovers) / 1e6
        stopped = sum(len(leftover.processes) for leftover in leftovers)
        verb = "would stop" if dry_run else "stopped"
        removed = "would remove" if dry_run else "removed"
        console.print(
            f"{verb} {stopped} processes; {removed} {len(leftovers)} directories "
            f"({total_mb:.1f} MB)"
        )
    if problems:
        raise UserError("could not remove: " + "; ".join(problems))

"""`harness history`: the runs under results/ (compare's and bench's), newest first, each
framework's peak or, for a bench, its ratio ours / minimal."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.options import RESULTS_OPTION, console
from model.errors import UserError


def history(results: Path, *, as_json: bool) -> None:
    """Print the runs under `results` (a table, or JSON); an unreadable directory is
    listed with the reason, never fatal."""
    from harness.history import list_history

    if not results.is_dir():
        raise UserError(f"no results directory {results}: give one with --results")
    entries = list_history(results)
    if as_json:
        print(json.dumps([entry.to_dict() for entry in entries], indent=2))
        return
    table = Table(title=f"runs under {results}, newest first")
    columns = ("run", "kind", "profile", "host", "status", "frameworks",
               "peak, or bench ours / minimal [95 % CI]")  # fmt: skip
    for column in columns:
        table.add_column(column)
    for entry in entries:
        if entry.problem is not None:
            table.add_row(entry.name, "", "", "", f"[red]unreadable[/]: {entry.problem}", "", "")
            continue
        # `aiohttp [h1-tls]` is a label, not rich markup
        peaks = "\n".join(escape(f"{label} {text}") for label, text in entry.peak_texts())
        table.add_row(
            entry.name, entry.kind, entry.profile, entry.host, entry.status,
            ", ".join(entry.frameworks), peaks,
        )  # fmt: skip
    console.print(table)
    if not entries:
        console.print(f"no runs under {results}")


def history_command(
    results: Path = RESULTS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """The runs under results/, newest first: id, kind (compare, bench http, bench ws),
    profile, host, status, frameworks and each framework's peak (a bench: its ratio ours /
    minimal and verdict) with its 95 % interval; unreadable directories listed as such."""
    history(results, as_json=as_json)

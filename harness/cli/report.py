"""`harness report`: re-draw runs' charts and report.html."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.options import console


def report_command(
    run_dirs: list[Path] = typer.Argument(..., help="results/<run-id> directories."),
    out: Path = typer.Option(None, help="Where overlaid figures go (default: first run/overlay)."),
) -> None:
    """Re-draw a run's charts and report.html; several runs are overlaid (same host only)."""
    from charts.render import render

    with console.status("drawing charts and the report…"):
        path = render(run_dirs, out)
    console.print(f"report: {path}")

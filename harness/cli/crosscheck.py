"""`harness crosscheck`: run the boards' test types on the servers the boards list and
print, per published pair, our ratio with its 95 % interval beside the published one, its
source and a verdict (harness.crosscheck); kept as JSON beside the runs and drawn as
Markdown and HTML (harness.crosscheck.report)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console


def crosscheck_command(
    only: str = typer.Option(
        None, help="Only the pairs whose test, scenario or server this comma list names."
    ),
    rounds: int = typer.Option(3, help="Rounds per comparison (the intervals), at least 2."),
    round_duration: float = typer.Option(3.0, help="Seconds per round."),
    step_duration: float = typer.Option(3.0, help="Seconds of the one ramp step."),
    warmup: float = typer.Option(2.0, help="Warm-up seconds before the step."),
    results: Path = typer.Option(
        None, "--results", metavar="DIR", help="The results directory (default: results/)."
    ),
    report: Path = typer.Option(
        None,
        help="Measure nothing: draw a kept crosscheck's Markdown and HTML again from its "
        "crosscheck-*.json (a results directory: its newest).",
    ),
) -> None:
    """Our figures beside the public boards': every published pair in
    harness/crosscheck/published.toml with our ratio, its interval, the source and a
    verdict (agrees within the file's band, or disagrees and what differs). Kept as
    crosscheck-<UTC start>.json beside the comparison runs, with .md and .html pages."""
    from charts.crosscheck import summary_line
    from harness.crosscheck import load_published, require_pairs
    from harness.crosscheck.measure import Timing, measure_and_keep
    from harness.crosscheck.report import console_table, redraw
    from model.errors import UserError

    console = Console()
    if report is not None:
        run, pages = redraw(report)
    else:
        if rounds < 2:
            raise UserError(f"--rounds {rounds}: at least 2 (a ratio's interval needs two)")
        published = require_pairs(load_published(), only)
        timing = Timing(rounds, round_duration, step_duration, warmup)
        run, pages = measure_and_keep(console, published, timing, results)
    console.print(console_table(run))
    console.print(summary_line(run.results))
    console.print(f"kept: {pages.json}\nMarkdown: {pages.markdown}\nHTML: {pages.html}")

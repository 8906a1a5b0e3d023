"""`harness crosscheck`: run the boards' test types on the servers the boards list and
print, per published pair, our ratio with its 95 % interval beside the published one, its
source and a verdict (harness.crosscheck); the same table as Markdown beside the runs."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def crosscheck_command(
    only: str = typer.Option(
        None, help="Only the pairs whose test, scenario or server this comma list names."
    ),
    rounds: int = typer.Option(3, help="Rounds per comparison (the intervals), at least 2."),
    round_duration: float = typer.Option(3.0, help="Seconds per round."),
    step_duration: float = typer.Option(3.0, help="Seconds of the one ramp step."),
    warmup: float = typer.Option(2.0, help="Warm-up seconds before the step."),
    out: Path = typer.Option(None, help="Results directory (default: results/)."),
) -> None:
    """Our figures beside the public boards': every published pair in
    harness/crosscheck/published.toml with our ratio, its interval, the source and a
    verdict (agrees within the file's band, or disagrees and what differs)."""
    from harness.crosscheck import crosscheck as judge_all
    from harness.crosscheck import load_published, markdown, require_pairs, rows, summary_line
    from harness.crosscheck.measure import Timing, boards_measure
    from model.errors import UserError

    if rounds < 2:
        raise UserError(f"--rounds {rounds}: at least 2 (a ratio's interval needs two)")
    console = Console()
    published = require_pairs(load_published(), only)
    timing = Timing(rounds, round_duration, step_duration, warmup)
    results = judge_all(published, boards_measure(console, out, timing))
    table = Table(title="crosscheck: our ratios beside the published boards'")
    for column in ("pair", "board", "test", "ours [95 % CI]", "published", "verdict", "source"):
        table.add_column(column, overflow="fold")
    for row in rows(results):
        table.add_row(*row)
    console.print(table)
    console.print(summary_line(results))
    folder = out or Path("results")
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / f"crosscheck-{time.strftime('%Y%m%d-%H%M%S')}.md"
    note = f"Each comparison: {rounds} rounds of {round_duration:g} s, one core per server."
    page.write_text(markdown(results, published.band, note))
    console.print(f"Markdown: {page}")

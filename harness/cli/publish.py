"""`harness publish OUT_DIR`: a static site of every run under results/ (harness.publish)."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.options import RESULTS_OPTION, console


def _count(number: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{number} {noun if number == 1 else plural}"


def publish_site(out_dir: Path, results: Path) -> Path:
    """Build the site into `out_dir`, print what it holds; returns the index's path."""
    from harness.publish import publish

    with console.status("drawing the reports and trends…"):
        site = publish(results, out_dir)
    console.print(
        f"{_count(site.runs, 'run')} ({site.drawn} drawn, {site.runs - site.drawn} up to "
        f"date), {_count(site.profiles, 'profile page')}, {_count(site.diffs, 'diff')}"
        + (f", {_count(site.benches, 'bench run')}" if site.benches else "")
        + (f", {_count(site.unreadable, 'unreadable directory')} listed" if site.unreadable else "")
    )
    for run_id, problem in site.problems.items():
        console.print(f"[yellow]note:[/] no report for {run_id}: {problem}")
    console.print(f"site: {site.index}")
    return site.index


def publish_command(
    out_dir: Path = typer.Argument(..., help="Where the site goes (made if missing)."),
    results: Path = RESULTS_OPTION,
) -> None:
    """A static site of every run under results/: an index by profile and host, each run's
    report, each profile's trend, the diffs between runs that share cases, and a bench page
    (each bench's ratio ours / minimal, its change and trend); relative links only (opens
    from a file:// path or any static host)."""
    publish_site(out_dir, results)

"""`harness trend --profile NAME`: each framework's peak across the runs of a profile on
one host, steps larger than noise marked; a PNG. `--profile bench` (`bench-ws`): each
framework's ratio ours / minimal across the bench runs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from harness.cli.options import RESULTS_OPTION, console
from model.errors import UserError


def trend(results: Path, *, profile: str, out: Path | None) -> Path:
    """Draw the trend of `profile`'s runs under `results` (those on the host of its newest
    run) into `out` (default `<results>/trend-<profile>.png`), print each step beyond the
    noise, and return the PNG's path."""
    from charts.trend import write_trend
    from harness.history import (
        bench_limits,
        bench_trend_series,
        list_history,
        steps_beyond_noise,
        trend_runs,
        trend_series,
    )
    from model.bench import BENCH_PROFILES

    if not results.is_dir():
        raise UserError(f"no results directory {results}: give one with --results")
    entries = list_history(results)
    chosen = trend_runs(entries, profile)
    if not chosen.runs:
        profiles = sorted({e.profile for e in entries if e.problem is None})
        raise UserError(
            f"no readable runs of profile {profile} under {results}"
            + (f": it holds {', '.join(profiles)}" if profiles else "")
        )
    title = f"profile {profile} on {chosen.host}: {len(chosen.runs)} runs"
    run_ids = [run.run_id for run in chosen.runs]
    path = out or results / f"trend-{profile}.png"
    if profile in BENCH_PROFILES.values():  # a bench's ratio ours / minimal
        series = bench_trend_series(chosen.runs)  # type: ignore[arg-type]
        steps = {label: steps_beyond_noise(points) for label, points in series.items()}
        limits = bench_limits(chosen.runs)  # type: ignore[arg-type]
        write_trend(path, run_ids, series, steps, title, "ours / minimal", what="ratio",
                    value_format="{x:.2f}×", limits=limits)  # fmt: skip
    else:
        series = trend_series(chosen.runs)  # type: ignore[arg-type]
        steps = {label: steps_beyond_noise(points) for label, points in series.items()}
        units = {c.summary.peak_unit for run in chosen.runs for c in run.cases}  # type: ignore[union-attr]
        write_trend(path, run_ids, series, steps, title, "/".join(sorted(units)) or "req/s")
    console.print(f"{len(chosen.runs)} runs of {profile} on {chosen.host}")
    if chosen.other_hosts:
        console.print(f"left out: {chosen.other_hosts} runs measured on other hosts")
    if chosen.unreadable:
        console.print(f"left out: {chosen.unreadable} unreadable directories (harness history)")
    for label, indices in steps.items():
        for index in indices:
            before, after = series[label][index - 1], series[label][index]
            shown = "{:.2f}" if profile in BENCH_PROFILES.values() else "{:,.0f}"
            console.print(
                f"step: {escape(label)} {shown.format(before.value)} → {shown.format(after.value)} "
                f"({after.value / before.value:.2f}×) from {before.run_id} to {after.run_id}"
            )
    if not any(steps.values()):
        console.print("no step beyond the noise (or no intervals to tell)")
    console.print(f"trend: {path}")
    return path


def trend_command(
    profile: str = typer.Option(..., help="The profile whose runs are drawn."),
    results: Path = RESULTS_OPTION,
    out: Path = typer.Option(None, help="The PNG (default: <results>/trend-<profile>.png)."),
) -> None:
    """Each framework's peak with its 95 % interval across the runs of one profile on one
    host (that of the newest run), steps larger than noise marked; a PNG. --profile bench
    (or bench-ws): each framework's ratio ours / minimal across the bench runs."""
    trend(results, profile=profile, out=out)

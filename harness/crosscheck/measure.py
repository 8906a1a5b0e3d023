"""How `harness crosscheck` measures a (scenario, concurrency): one comparison of the
servers involved with the `boards` profile's shape, its ramp the one concurrency, in
rounds for the paired ratios' intervals (harness.compare does the run; its charts and
report.html are drawn as `harness compare` draws them)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from charts.render import render
from harness.compare import build_plan, run_plan
from harness.crosscheck import Published, crosscheck
from harness.crosscheck.report import Pages, back_link, keep
from harness.run.plan import now_iso
from harness.run_options import DEFAULT_RESULTS_DIR, RunOptions
from model.crosscheck import CrosscheckRun
from model.results import Run
from servers import FRAMEWORKS
from servers.plugins import load_plugins

PROFILE = "boards"


@dataclass(frozen=True)
class Timing:
    """Seconds and rounds of each comparison: short by default, the boards' own take 15 s
    steps (the boards profile)."""

    rounds: int = 3
    round_duration_s: float = 3.0
    step_duration_s: float = 3.0
    warmup_s: float = 2.0


def boards_measure(
    console: Console,
    out: Path | None,
    timing: Timing,
    links: Sequence[tuple[str, str]] = (),
) -> Callable[[str, int, list[str]], Run | str]:
    """`measure(scenario, concurrency, servers)` for harness.crosscheck.crosscheck: the
    comparison's Run, or why it did not run (a server not installed). `links` (label,
    URL relative to a run's directory): above each comparison's report title."""
    load_plugins()  # the contenders (uvicorn, granian, hypercorn) are plugins

    def measure(scenario: str, concurrency: int, servers: list[str]) -> Run | str:
        missing = [s for s in servers if s not in FRAMEWORKS or not FRAMEWORKS[s].available()]
        if missing:
            return f"not installed here: {', '.join(missing)}"
        settings = {
            "scenario": scenario,
            "ramp.levels": str(concurrency),
            "duration_s": timing.step_duration_s,
            "rounds": timing.rounds,
            "round_duration_s": timing.round_duration_s,
            "warmup_s": timing.warmup_s,
            "precision_pct": 0.0,  # a fixed number of rounds: the run's time is known
            "max_time_s": 0.0,
        }
        options = RunOptions(
            frameworks=",".join(servers),
            profile=PROFILE,
            settings=settings,
            results_dir=out or DEFAULT_RESULTS_DIR,
        )
        plan = build_plan(options)
        console.print(
            f"crosscheck: {scenario} at {concurrency} connections, {', '.join(servers)}: "
            f"{plan.out_dir}"
        )
        run, _ = run_plan(plan, console)
        # the crosscheck's page links each comparison's report: drawn as compare draws it
        with console.status("drawing the comparison's charts and report…"):
            render([plan.out_dir], links=links)
        return run

    return measure


def measure_and_keep(
    console: Console, published: Published, timing: Timing, out: Path | None
) -> tuple[CrosscheckRun, Pages]:
    """Every pair of `published` measured and judged, kept beside its comparison runs in
    `out` (default results/) as crosscheck-<UTC start>.json with its pages."""
    started, stamp = now_iso(), time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    measure = boards_measure(console, out, timing, links=[back_link(stamp)])
    results = crosscheck(published, measure)
    note = (
        f"Each comparison: {timing.rounds} rounds of {timing.round_duration_s:g} s, "
        "one core per server."
    )
    run = CrosscheckRun(started, published.band, note, tuple(results))
    return run, keep(run, out or DEFAULT_RESULTS_DIR, stamp)

"""From steps to figures: the peak, repeats combined, confirmation rounds and their
intervals, ratios to nginx, the driver-bound test.

Pure functions of results (no server, no clock), unit-tested without a network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from drivers.base import Driver, DriverResult
from harness.stats import Interval, mean_interval, paired_ratio_interval
from model.ramps import RampStep
from model.results import Case, Step, Summary

DRIVER_BOUND_CPU_FRACTION = 0.90
DATABASE_BOUND_CPU_FRACTION = 0.90  # of the database's cores (one unless --db-cpus)
SERVER_HEADROOM_FRACTION = 0.90  # below this share of its cores the server had headroom
NOISY_SPREAD = 0.10
RATE_ACHIEVED_FRACTION = 0.95  # autobench: a step holds when it achieved 95 % of the demand


def is_driver_bound(
    driver: Driver,
    result: DriverResult,
    step: RampStep,
    *,
    agent_cpu_pct: float | None,
    agent_cpu_count: int,
    calls_per_connection: int,
) -> bool:
    """The load generator, not the server, limited the step."""
    if driver.busy_polls:
        asked = step.offered / calls_per_connection
        offered = result.extra.get("connection_rate_per_s")
        return offered is not None and offered < RATE_ACHIEVED_FRACTION * asked
    if agent_cpu_pct is None:
        return False
    return agent_cpu_pct >= DRIVER_BOUND_CPU_FRACTION * 100.0 * agent_cpu_count


def database_bound_note(
    steps: Sequence[Step], *, server_cores: int, database_cores: int
) -> str | None:
    """A note when, in some step, the database (FerretDB + PostgreSQL, `extra.db_cpu_pct`)
    used at least 90 % of its cores while the server used less than 90 % of its own: then
    the database, not the server, was the bottleneck. `database_cores` is one unless the
    database is pinned (FerretDB on one core is what a single client connection can use);
    `server_cores` is what the server can use (its processes, at most its CPUs)."""
    bound = [
        s
        for s in steps
        if s.extra.get("db_cpu_pct") is not None
        and s.server_cpu_pct is not None
        and s.extra["db_cpu_pct"] >= DATABASE_BOUND_CPU_FRACTION * 100.0 * database_cores
        and s.server_cpu_pct < SERVER_HEADROOM_FRACTION * 100.0 * server_cores
    ]
    if not bound:
        return None
    worst = max(bound, key=lambda s: s.extra["db_cpu_pct"])
    return (
        f"the database, not the server, was the bottleneck in {len(bound)} of {len(steps)} "
        f"steps: at {worst.offered:g} {worst.unit} FerretDB and PostgreSQL used "
        f"{worst.extra['db_cpu_pct']:.0f} % CPU while the server used "
        f"{worst.server_cpu_pct:.0f} % (100 % is one core)"
    )


def summarize(steps: Sequence[Step]) -> Summary:
    """The peak (autobench's reading for rate ramps: the highest offered step with no errors
    that achieved ≥ 95 % of it; for concurrency: the best error-free req/s) and its context."""
    if not steps:
        return Summary()
    clean = [s for s in steps if s.errors["total"] == 0]
    if steps[0].unit == "req/s":
        clean = [s for s in clean if s.achieved >= RATE_ACHIEVED_FRACTION * s.offered]
        best = max(clean, key=lambda s: s.offered, default=None)
        peak = best.offered if best else None
    else:
        best = max(clean, key=lambda s: s.achieved, default=None)
        peak = best.achieved if best else None
    rss = [s.rss_max_bytes for s in steps if s.rss_max_bytes is not None]
    return Summary(
        peak=peak,
        peak_unit="req/s",
        peak_offered=best.offered if best else None,
        p99_at_peak_ms=best.latency_ms.get("p99") if best else None,
        megabytes_per_s_at_peak=best.extra.get("megabytes_per_s") if best else None,
        avg_latency_at_peak_ms=best.latency_ms.get("avg") if best else None,
        server_cpu_at_peak_pct=best.server_cpu_pct if best else None,
        rss_max_bytes=max(rss) if rss else None,
        errors_total=sum(s.errors["total"] for s in steps),
        flags=tuple(sorted({flag for s in steps for flag in s.flags})),
    )


def combine_repeats(cases: Sequence[Case]) -> Case:
    """Several runs of one case as one: each step is the median run (by achieved)."""
    ok = [c for c in cases if c.status == "ok"]
    if len(cases) == 1 or not ok:
        return cases[0]
    steps = []
    for index in range(min(len(c.steps) for c in ok)):
        runs = sorted((c.steps[index] for c in ok), key=lambda s: s.achieved)
        median_step = runs[(len(runs) - 1) // 2]
        achieved = [s.achieved for s in runs]
        middle = statistics.median(achieved)
        spread = (max(achieved) - min(achieved)) / middle if middle else 0.0
        flags = set(median_step.flags)
        if spread > NOISY_SPREAD:
            flags.add("noisy")
        steps.append(
            dataclasses.replace(
                median_step,
                achieved=round(middle, 1),
                flags=tuple(sorted(flags)),
                extra={
                    **median_step.extra,
                    "repeats": len(runs),
                    "achieved_runs": achieved,
                    "spread": round(spread, 4),
                },
            )
        )
    failures = tuple(c.error or "" for c in cases if c.status != "ok")
    summary = dataclasses.replace(summarize(steps), repeats=len(cases), failed_repeats=failures)
    return dataclasses.replace(ok[0], steps=tuple(steps), summary=summary)


def _pair(interval: Interval | None, digits: int) -> tuple[float, float] | None:
    """(low, high) rounded, the low end clamped at 0: every figure given an interval here
    (a rate, a latency, a CPU share, a ratio) is non-negative, though a t interval on few
    noisy rounds can reach below it."""
    if interval is None:
        return None
    rounded = interval.rounded(digits)
    return (max(0.0, rounded.low), rounded.high)


def usable_rounds(rounds: Sequence[Step]) -> list[Step]:
    """The rounds that count: those not flagged `contended`, unless fewer than two are left
    (then all of them, and the summary says how many were contended)."""
    quiet = [s for s in rounds if "contended" not in s.flags]
    return quiet if len(quiet) >= 2 else list(rounds)


def with_rounds(case: Case, rounds: Sequence[tuple[int, Case]]) -> Case:
    """The case's figures from its confirmation rounds (`(round index, round case)`): the
    peak, p99 and server CPU become the rounds' means with 95 % intervals; the ramp's peak
    stays as `ramp_peak`. A failed round is listed in `failed_repeats`."""
    if case.status != "ok" or not rounds:
        return case
    steps = tuple(
        dataclasses.replace(r.steps[0], extra={**r.steps[0].extra, "round": index})
        for index, r in rounds
        if r.status == "ok" and r.steps
    )
    failures = tuple(
        f"round {index + 1}: {r.error}" for index, r in rounds if r.status != "ok" or not r.steps
    )
    summary = dataclasses.replace(
        case.summary,
        rounds=len(steps),
        rounds_contended=sum("contended" in s.flags for s in steps),
        failed_repeats=case.summary.failed_repeats + failures,
    )
    used = usable_rounds(steps)
    peak = mean_interval([s.achieved for s in used])
    if peak is not None:
        p99 = mean_interval([v for s in used if (v := s.latency_ms.get("p99")) is not None])
        cpu = mean_interval([v for s in used if (v := s.server_cpu_pct) is not None])
        summary = dataclasses.replace(
            summary,
            ramp_peak=case.summary.peak,
            peak=round(peak.value, 1),
            peak_ci=_pair(peak, 1),
            p99_at_peak_ms=round(p99.value, 3) if p99 else case.summary.p99_at_peak_ms,
            p99_at_peak_ci_ms=_pair(p99, 3),
            server_cpu_at_peak_pct=round(cpu.value, 1) if cpu else None,
            server_cpu_at_peak_ci_pct=_pair(cpu, 1),
            flags=tuple(sorted({*summary.flags, *(f for s in steps for f in s.flags)})),
        )
    return dataclasses.replace(case, rounds=steps, summary=summary)


def round_ratio(case: Case, other: Case) -> Interval | None:
    """`case` / `other` by paired rounds (round r against round r, which ran seconds
    apart); None unless at least two rounds pair up."""
    mine = {s.extra["round"]: s.achieved for s in usable_rounds(case.rounds)}
    theirs = {s.extra["round"]: s.achieved for s in usable_rounds(other.rounds)}
    both = sorted(set(mine) & set(theirs))
    return paired_ratio_interval([mine[i] for i in both], [theirs[i] for i in both])


def with_baseline_ratios(cases: Sequence[Case], roles: Mapping[str, str]) -> list[Case]:
    """Each case's role (from `roles`, framework by default), and its peak as a ratio to
    nginx's peak in the same run (the affinity study: on noisy machines the ratio to a
    baseline measured alongside is the figure that travels).

    nginx is matched on scenario, sink, driver, affinity mode and process model, falling back
    to nginx's case with the same scenario and mode under any process model. With rounds
    on both sides the ratio is taken round by round, with its interval.
    """
    nginx = [c for c in cases if c.framework == "nginx" and c.status == "ok"]

    def nginx_case(case: Case) -> Case | None:
        same = [
            c
            for c in nginx
            if (c.scenario, c.sink, c.driver, c.affinity.get("mode"))
            == (case.scenario, case.sink, case.driver, case.affinity.get("mode"))
        ]
        exact = [c for c in same if c.process_model == case.process_model]
        return (exact or same or [None])[0]

    result = []
    for case in cases:
        summary = dataclasses.replace(case.summary, role=roles.get(case.framework, "framework"))
        peak, baseline = summary.peak, nginx_case(case)
        if peak is not None and baseline and baseline.summary.peak and summary.peak_unit == "req/s":
            paired = round_ratio(case, baseline)
            summary = dataclasses.replace(
                summary,
                ratio_to_nginx=round(
                    paired.value if paired else float(peak) / float(baseline.summary.peak), 3
                ),
                ratio_to_nginx_ci=_pair(paired, 3),
            )
        result.append(dataclasses.replace(case, summary=summary))
    return result

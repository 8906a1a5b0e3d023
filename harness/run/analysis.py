"""From steps to figures: the peak, repeats combined, ratios to nginx, the driver-bound test.

Pure functions of results (no server, no clock), unit-tested without a network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from drivers.base import Driver, DriverResult
from model.ramps import RampStep
from model.results import Case, Step, Summary

DRIVER_BOUND_CPU_FRACTION = 0.90
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


def with_baseline_ratios(cases: Sequence[Case], roles: Mapping[str, str]) -> list[Case]:
    """Each case's role (from `roles`, framework by default), and its peak as a ratio to
    nginx's peak in the same run (the affinity study: on noisy machines the ratio to a
    baseline measured alongside is the figure that travels).

    nginx is matched on scenario, sink, driver, affinity mode and process model, falling back
    to nginx's case with the same scenario and mode under any process model.
    """
    nginx = [c for c in cases if c.framework == "nginx" and c.status == "ok"]

    def nginx_peak(case: Case) -> float | None:
        same = [
            c
            for c in nginx
            if (c.scenario, c.sink, c.driver, c.affinity.get("mode"))
            == (case.scenario, case.sink, case.driver, case.affinity.get("mode"))
        ]
        exact = [c for c in same if c.process_model == case.process_model]
        chosen = (exact or same or [None])[0]
        return chosen.summary.peak if chosen is not None else None

    result = []
    for case in cases:
        summary = dataclasses.replace(case.summary, role=roles.get(case.framework, "framework"))
        peak, baseline = summary.peak, nginx_peak(case)
        if peak is not None and baseline and summary.peak_unit == "req/s":
            summary = dataclasses.replace(
                summary, ratio_to_nginx=round(float(peak) / float(baseline), 3)
            )
        result.append(dataclasses.replace(case, summary=summary))
    return result

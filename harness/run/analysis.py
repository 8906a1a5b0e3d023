"""From steps to figures: the peak, repeats combined, ratios to nginx, the driver-bound test.

Pure functions of results (no server, no clock), unit-tested without a network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from drivers import histograms as hdr
from drivers.base import Driver, DriverResult
from model.ramps import RampStep
from model.results import Case, Step, Summary

DRIVER_BOUND_CPU_FRACTION = 0.90
NOISY_SPREAD = 0.10
RATE_ACHIEVED_FRACTION = 0.95  # autobench: a step holds when it achieved 95 % of the demand
SCHEDULE_KEPT_FRACTION = 0.98  # an open-loop driver keeps its schedule within 2 %
CPU_WAIT_CONTENDED_PCT = 10.0  # % of a core spent runnable, waiting for a CPU someone held
KNEE_FACTOR = 3.0  # p99 this many times its floor...
KNEE_MARGIN_MS = 1.0  # ...and this much above it is off the floor


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


def behind_schedule(result: DriverResult, *, driver_limited: bool) -> bool:
    """An open-loop driver (oha) sent fewer than 98 % of the requests due, and the driver
    is to blame: it had a free connection, or it was short of CPU (`driver_limited`: it
    used ≥ 90 % of its CPUs or waited for them, and a driver that cannot run does not read
    replies, which keeps its connections busy too). The step is then `driver_capped`.
    With every connection busy and the driver running freely the server held them up: it
    is saturated, which the step's achieved rate says."""
    extra = result.extra
    if "sent_per_s" not in extra or not extra.get("offered_per_s"):
        return False
    short = extra["sent_per_s"] < SCHEDULE_KEPT_FRACTION * extra["offered_per_s"]
    connection_free = extra.get("max_in_flight", 0) < extra.get("connections", 0)
    return short and (connection_free or driver_limited)


def cpu_contended(stats: Mapping[str, float | None]) -> tuple[bool, bool]:
    """(anyone, the driver): whether the server or the load generator, and whether the load
    generator itself, waited ≥ 10 % of a core for a CPU another process held."""
    waits = {key: stats.get(key) for key in ("server_cpu_wait_pct", "agent_cpu_wait_pct")}
    over = {key: w is not None and w >= CPU_WAIT_CONTENDED_PCT for key, w in waits.items()}
    return any(over.values()), over["agent_cpu_wait_pct"]


def step_holds(step: Step, saturation_p99_ms: float | None = None) -> bool:
    """A rate step held: no errors, ≥ 95 % of the offered rate achieved (autobench's
    reading) and, when a ceiling is given, p99 under it."""
    if step.errors["total"] or step.achieved < RATE_ACHIEVED_FRACTION * step.offered:
        return False
    if saturation_p99_ms is None:
        return True
    p99 = step.latency_ms.get("p99")
    return p99 is not None and p99 <= saturation_p99_ms


def find_knee(steps: Sequence[Step]) -> dict[str, float | None] | None:
    """The knee of a rate ramp: the offered rate where p99 leaves its floor.

    A step's floor is the lowest p99 of the held steps before it (light loads set it; a
    spike cannot lower it). A step is off the floor when it did not hold (`step_holds`)
    or its p99 exceeds both KNEE_FACTOR (3) × the floor and the floor + KNEE_MARGIN_MS
    (1 ms: sub-millisecond jitter is not a knee). The knee is the first step from which
    every later step is off the floor — a lone spike that comes back down is not one.

    Returns `offered` (the knee step's rate) and `p99_ms` there, `last_on_floor` (the
    rate before it: the highest load still on the floor), `floor_p99_ms` and
    `threshold_ms`; None when there are no p99s or every step stays on the floor (the
    ramp ended below the knee). p99 here is the step's `latency_ms`: for oha, from each
    request's intended send.
    """
    steps = [s for s in steps if s.unit == "req/s"]
    if not steps or all(s.latency_ms.get("p99") is None for s in steps):
        return None

    def off_floor(step: Step, floor: float | None) -> bool:
        p99 = step.latency_ms.get("p99")
        if not step_holds(step) or p99 is None:
            return True
        if floor is None:  # nothing lighter held: this step sets the floor
            return False
        return p99 > max(KNEE_FACTOR * floor, floor + KNEE_MARGIN_MS)

    for index, step in enumerate(steps):
        held = [s.latency_ms["p99"] for s in steps[:index] if step_holds(s)]
        floor = min((p for p in held if p is not None), default=None)
        if all(off_floor(later, floor) for later in steps[index:]):
            threshold = max(KNEE_FACTOR * floor, floor + KNEE_MARGIN_MS) if floor else None
            return {
                "offered": step.offered,
                "p99_ms": step.latency_ms.get("p99"),
                "last_on_floor": steps[index - 1].offered if index else None,
                "floor_p99_ms": floor,
                "threshold_ms": round(threshold, 3) if threshold is not None else None,
            }
    return None


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
        knee=find_knee(steps) if steps[0].unit == "req/s" else None,
    )


def merged_latency(runs: Sequence[Step]) -> dict[str, object]:
    """The latency of several repeats of one step, read from their histograms added
    together (exact: every request of every repeat counts once): `histograms`,
    `latency_ms` and `latency_uncorrected_ms` as a Step has them. Empty when a repeat kept
    no histogram (then the median repeat's figures stand)."""
    merged: dict[str, object] = {}
    names = {name for step in runs for name in step.histograms}
    if not names or not all(set(step.histograms) == names for step in runs):
        return merged
    histograms = {}
    for name in sorted(names):
        histogram = hdr.merge([hdr.decode(step.histograms[name]) for step in runs])
        histograms[name] = hdr.encode(histogram)
        figures = {
            k: round(v, 3) if v is not None else None for k, v in hdr.latency_ms(histogram).items()
        }
        merged["latency_ms" if name == "latency" else "latency_uncorrected_ms"] = figures
    merged["histograms"] = histograms
    return merged


def combine_repeats(cases: Sequence[Case]) -> Case:
    """Several runs of one case as one: each step is the median run (by achieved), with
    the latency of every run (their histograms merged) where the driver kept them."""
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
                **merged_latency(runs),  # type: ignore[arg-type]
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

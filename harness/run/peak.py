"""A ramp's peak and what was measured there (`summarize`), the knee of a rate ramp, and
repeats of one case combined (`combine_repeats`).

Pure functions of steps, unit-tested without a network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from drivers import histograms as hdr
from harness.run.bottleneck import RATE_ACHIEVED_FRACTION
from model.results import Case, Step, Summary

NOISY_SPREAD = 0.10  # repeats whose achieved rates spread wider than this share are noisy
KNEE_FACTOR = 3.0  # p99 this many times its floor...
KNEE_MARGIN_MS = 1.0  # ...and this much above it is off the floor


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


def connection_step_errors(steps: Sequence[Step]) -> list[int]:
    """Each connection step's own errors: the connections that failed or that the server
    closed while the step was opened and held.

    A connection step's `errors["total"]` counts from the ramp's start (the agents'
    counters never reset), so a step's own are the difference from the step before. Its
    `figures.errors_in_step` is not enough: it covers the hold only, and failures while the
    step was being opened fall between two holds, in neither. (Repeats combined take each
    step from the median run, so a difference may fall below 0: no step of one run; it is
    not read as error-free.)"""
    totals = [step.errors["total"] for step in steps]
    return [after - before for before, after in zip([0, *totals], totals, strict=False)]


def connection_peak_step(steps: Sequence[Step]) -> Step | None:
    """The peak step of a connection ramp: the highest step (by connections offered) with
    no error of its own (`connection_step_errors`) — the top step when none failed; None
    when every step had errors. Its `achieved` (the connections held) is the peak and its
    `offered` the load it was held at: value and load from the same step."""
    clean = [
        step
        for step, errors in zip(steps, connection_step_errors(steps), strict=True)
        if errors == 0
    ]
    return max(clean, key=lambda step: step.offered, default=None)


def summarize(steps: Sequence[Step]) -> Summary:
    """The peak (autobench's reading for rate ramps: the highest offered step with no errors
    that achieved ≥ 95 % of it; for concurrency: the best error-free req/s; for connection
    ramps: the highest step with no error of its own, `connection_peak_step`) and what was
    measured at that same step.

    Steps the load generator limited (`driver_bound`) measure the driver, so the peak is
    read from the others; when every candidate was driver-bound it is read from them and
    `limit_note` says so."""
    if not steps:
        return Summary()
    if steps[0].unit == "conns":
        best = connection_peak_step(steps)
        return _summary_at(best, best.achieved if best else None, steps, limit_note=None)
    clean = [s for s in steps if s.errors["total"] == 0]
    if steps[0].unit == "req/s":
        clean = [s for s in clean if s.achieved >= RATE_ACHIEVED_FRACTION * s.offered]
    server_limited = [s for s in clean if "driver_bound" not in s.flags]
    limit_note = None
    if clean and not server_limited:
        limit_note = (
            "the load generator limited every error-free step (driver_bound): "
            "the peak measures the driver, not the server"
        )
    candidates = server_limited or clean
    if steps[0].unit == "req/s":
        best = max(candidates, key=lambda s: s.offered, default=None)
        peak = best.offered if best else None
    else:
        best = max(candidates, key=lambda s: s.achieved, default=None)
        peak = best.achieved if best else None
    return _summary_at(best, peak, steps, limit_note=limit_note)


def _summary_at(
    best: Step | None, peak: float | None, steps: Sequence[Step], *, limit_note: str | None
) -> Summary:
    """The summary of `steps` whose peak is `peak`, read at the step `best`: every figure
    "at peak" comes from that one step."""
    conns = steps[0].unit == "conns"
    rss = [s.rss_max_bytes for s in steps if s.rss_max_bytes is not None]
    return Summary(
        limit_note=limit_note,
        peak=peak,
        peak_unit="conns" if conns else "req/s",
        peak_offered=best.offered if best else None,
        p99_at_peak_ms=best.latency_ms.get("p99") if best else None,
        megabytes_per_s_at_peak=best.figures.megabytes_per_s if best else None,
        avg_latency_at_peak_ms=best.latency_ms.get("avg") if best else None,
        server_cpu_at_peak_pct=best.server_cpu_pct if best else None,
        cpu_us_per_req=best.cpu_us_per_req if best else None,
        agent_cpu_us_per_req=best.agent_cpu_us_per_req if best else None,
        rss_max_bytes=max(rss) if rss else None,
        # a connection step's total already holds every earlier step's
        errors_total=sum(connection_step_errors(steps))
        if conns
        else sum(s.errors["total"] for s in steps),
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
                figures=dataclasses.replace(
                    median_step.figures,
                    repeats=len(runs),
                    achieved_runs=achieved,
                    spread=round(spread, 4),
                ),
            )
        )
    failures = tuple(c.error or "" for c in cases if c.status != "ok")
    peaks = [c.summary.memory_peak_bytes for c in ok if c.summary.memory_peak_bytes is not None]
    closings = [c.summary.closing for c in ok if c.summary.closing is not None]
    summary = dataclasses.replace(
        summarize(steps),
        repeats=len(cases),
        failed_repeats=failures,
        cgroup=ok[0].summary.cgroup,  # every repeat ran in the run's one cgroup mode
        memory_peak_bytes=max(peaks) if peaks else None,
        # a close storm's worst repeat: the stall a user may meet
        closing=max(closings, key=lambda c: c["tick_max_ms"] or 0.0, default=None),
    )
    return dataclasses.replace(ok[0], steps=tuple(steps), summary=summary)

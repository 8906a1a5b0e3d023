"""Confirmation rounds as figures: the load they measure (`rounds_offered`, the trial
loads of a tie), which rounds count (`usable_rounds`), the case's figures from its rounds
with their 95 % intervals (`with_rounds`) and ratios paired round by round
(`round_ratio`).

Pure functions of cases and steps, unit-tested without a network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

from harness.run.precision import (
    case_precise,
    exclusion_note,
    half_width_pct,
    imprecise_reason,
    noise_source,
    round_exclusions,
    stall_note,
)
from harness.stats import Interval, mean_interval, paired_ratio_interval
from model.figures import figure
from model.results import Case, Step

# Confirmation rounds of a concurrency ramp measure the plateau's first point: the lowest
# concurrency whose ramp reading came within this share of the best. One ramp step is one
# short reading (2 s in the quick profile) and which of two near-equal steps reads higher
# is noise: two quick compares of one commit put gevent's rounds at 50 connections in one
# (13,142 req/s) and at 200 in the next (12,067: its ramp read 12,177 at 50 and 12,516 at
# 200), a "significant" 8 % apart in harness diff; tornado likewise (7,509 against 6,902).
PLATEAU_FRACTION = 0.95


def _plateau_candidates(case: Case) -> list[Step]:
    """The ramp steps a rounds' load may be chosen from: error-free, and those the load
    generator limited left out (unless that leaves none), as for the peak (`summarize`)."""
    clean = [s for s in case.steps if s.errors["total"] == 0]
    return [s for s in clean if "driver_bound" not in s.flags] or clean


def rounds_offered(case: Case) -> float | None:
    """The load a case's confirmation rounds measure: the ramp's peak load, but for a
    concurrency ramp the lowest concurrency whose error-free reading came within
    PLATEAU_FRACTION of the best (steps the load generator limited left out, as for the
    peak: `summarize`); None without a peak."""
    offered = case.summary.peak_offered
    if offered is None or not case.steps or case.steps[0].unit != "concurrency":
        return offered
    candidates = _plateau_candidates(case)
    if not candidates:
        return offered
    best = max(s.achieved for s in candidates)
    return min(s.offered for s in candidates if s.achieved >= PLATEAU_FRACTION * best)


# A concurrency ramp whose error-free readings at several loads came within this share of
# the best is a tie its short steps cannot break: two quick compares of one commit put
# node-http's rounds at 200 connections in one (55,485 req/s, p99 119 ms; its ramp read
# 200 more than 5 % above 50) and at 50 in the next (62,514, p99 3.2 ms), which harness
# diff called 1.127× faster. Such a case's first round is tried at each tied load
# (`trial_loads`) and the rounds go on at the one `trial_choice` picks from those longer
# readings.
TIE_FRACTION = 0.85
MAX_TRIAL_LOADS = 3  # the tied loads tried: the ramp's best readings among them


def trial_loads(case: Case) -> list[float]:
    """The loads a concurrency case's first round is tried at, ascending: every error-free
    ramp load (steps the load generator limited left out) whose reading came within
    TIE_FRACTION of the best, at most MAX_TRIAL_LOADS of them (the best readings, always
    with `rounds_offered`'s choice); one load, or none, means no trial."""
    chosen = rounds_offered(case)
    if chosen is None or not case.steps or case.steps[0].unit != "concurrency":
        return []
    candidates = _plateau_candidates(case)
    best = max((s.achieved for s in candidates), default=0.0)
    tied = sorted(
        (s for s in candidates if s.achieved >= TIE_FRACTION * best and s.offered != chosen),
        key=lambda s: -s.achieved,
    )
    loads = [chosen, *dict.fromkeys(s.offered for s in tied)][:MAX_TRIAL_LOADS]
    return sorted(loads) if len(loads) > 1 else []


def trial_choice(readings: Mapping[float, float]) -> float:
    """The load the rounds go on at, from the first round's reading at each tied load
    (`{load: req/s}`): the lowest whose reading came within PLATEAU_FRACTION of the best,
    the rule `rounds_offered` applies to the ramp, now on round-length readings."""
    best = max(readings.values())
    return min(load for load, achieved in readings.items() if achieved >= PLATEAU_FRACTION * best)


def trial_note(steps: Sequence[Step]) -> str | None:
    """What a case's trial rounds read (`figures.trials` of its first round: `[[load, req/s],
    ...]`), for the summary; None without trials."""
    trials = next((s.figures.trials for s in steps if s.figures.trials), None)
    if not trials:
        return None
    chosen = next(s.offered for s in steps if s.figures.trials)
    read = ", ".join(f"{achieved:,.0f} req/s at {figure(load)}" for load, achieved in trials)
    return (
        f"rounds at concurrency {chosen:g}: the ramp's readings tied, the first round read {read}"
    )


def rounded_pair(interval: Interval | None, digits: int) -> tuple[float, float] | None:
    """(low, high) rounded, the low end clamped at 0: every figure given an interval here
    (a rate, a latency, a CPU share, a ratio) is non-negative, though a t interval on few
    noisy rounds can reach below it."""
    if interval is None:
        return None
    rounded = interval.rounded(digits)
    return (max(0.0, rounded.low), rounded.high)


def _round_of(step: Step, position: int) -> int:
    """A round's index: its `figures.round`, else its position among the rounds."""
    return step.figures.round if step.figures.round is not None else position


def usable_rounds(rounds: Sequence[Step]) -> list[Step]:
    """The rounds that count: all but those harness.run.precision.round_exclusions keeps
    out (contended or stalled), unless fewer than two would be left (then all of them,
    and the summary's limit_note says so)."""
    excluded = {e.round for e in round_exclusions(rounds)}
    return [s for i, s in enumerate(rounds) if _round_of(s, i) not in excluded]


def with_rounds(
    case: Case, rounds: Sequence[tuple[int, Case]], precision_pct: float | None = None
) -> Case:
    """The case's figures from its confirmation rounds (`(round index, round case)`): the
    peak, p99, server CPU and CPU µs per request become the usable rounds' means with 95 %
    intervals (the load generator's CPU µs per request their mean); the
    ramp's peak stays as `ramp_peak`. A failed round is listed in `failed_repeats`, a round
    kept out in `rounds_excluded` with its reason. With `precision_pct` (`--precision`), a
    case whose peak's half-width is wider is `imprecise`, with the width it reached and
    where its noise comes from (harness.run.precision)."""
    if case.status != "ok" or not rounds:
        return case
    steps = tuple(
        dataclasses.replace(
            r.steps[0], figures=dataclasses.replace(r.steps[0].figures, round=index)
        )
        for index, r in rounds
        if r.status == "ok" and r.steps
    )
    failures = tuple(
        f"round {index + 1}: {r.error}" for index, r in rounds if r.status != "ok" or not r.steps
    )
    excluded = round_exclusions(steps)
    notes = [case.summary.limit_note, stall_note(steps), exclusion_note(steps), trial_note(steps)]
    summary = dataclasses.replace(
        case.summary,
        rounds=len(steps),
        rounds_contended=sum("contended" in s.flags for s in steps),
        failed_repeats=case.summary.failed_repeats + failures,
        rounds_excluded=tuple(e.to_dict() for e in excluded),
        precision_pct=precision_pct,
        limit_note="; ".join(n for n in dict.fromkeys(notes) if n) or None,
    )
    used = usable_rounds(steps)
    peak = mean_interval([s.achieved for s in used])
    if peak is not None:
        p99 = mean_interval([v for s in used if (v := s.latency_ms.get("p99")) is not None])
        cpu = mean_interval([v for s in used if (v := s.server_cpu_pct) is not None])
        per_req = mean_interval([v for s in used if (v := s.cpu_us_per_req) is not None])
        agent_per_req = [v for s in used if (v := s.agent_cpu_us_per_req) is not None]
        width = half_width_pct([s.achieved for s in used])
        lengths = [s.figures.round_s for s in steps if s.figures.round_s]
        summary = dataclasses.replace(
            summary,
            ramp_peak=case.summary.peak,
            peak=round(peak.value, 1),
            peak_offered=used[0].offered,  # where the rounds ran (`rounds_offered`)
            peak_ci=rounded_pair(peak, 1),
            p99_at_peak_ms=round(p99.value, 3) if p99 else case.summary.p99_at_peak_ms,
            p99_at_peak_ci_ms=rounded_pair(p99, 3),
            server_cpu_at_peak_pct=round(cpu.value, 1) if cpu else None,
            server_cpu_at_peak_ci_pct=rounded_pair(cpu, 1),
            cpu_us_per_req=round(per_req.value, 1) if per_req else summary.cpu_us_per_req,
            cpu_us_per_req_ci=rounded_pair(per_req, 1),
            agent_cpu_us_per_req=(
                round(statistics.fmean(agent_per_req), 1)
                if agent_per_req
                else summary.agent_cpu_us_per_req
            ),
            half_width_pct=round(width, 2) if width is not None else None,
            round_duration_s=max(lengths) if lengths else None,
            flags=tuple(sorted({*summary.flags, *(f for s in steps for f in s.flags)})),
        )
    if precision_pct is not None and not case_precise([s.achieved for s in used], precision_pct):
        source, note = noise_source(steps, used)
        summary = dataclasses.replace(
            summary,
            flags=tuple(sorted({*summary.flags, "imprecise"})),
            imprecise_reason=imprecise_reason(summary.half_width_pct, len(used), precision_pct),
            noise_source=source,
            noise_note=note,
        )
    return dataclasses.replace(case, rounds=steps, summary=summary)


def round_ratio(case: Case, other: Case) -> Interval | None:
    """`case` / `other` by paired rounds (round r against round r, which ran seconds
    apart); None unless at least two rounds pair up."""
    mine = {s.figures.round: s.achieved for s in usable_rounds(case.rounds)}
    theirs = {s.figures.round: s.achieved for s in usable_rounds(other.rounds)}
    both = sorted(set(mine) & set(theirs))
    return paired_ratio_interval([mine[i] for i in both], [theirs[i] for i in both])

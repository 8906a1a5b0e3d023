"""Confirmation rounds: each framework's peak load measured again, interleaved, for intervals.

The ramp finds where each framework peaks (its best concurrency, or the highest rate it
held); a ramp step is one sample, and one sample has no error bar. So after the ramp,
`profile.rounds` rounds run, each a fresh server, a short warm-up and one fixed-load step
of `profile.round_duration_s` at that framework's peak, every framework once per round and
the order rotated each round (A B C, B C A, C A B …) so that drift and position touch
everyone alike. harness.stats turns the rounds into intervals (analysis.with_rounds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from harness.profile import Profile
from harness.run.case import run_case
from harness.run.context import RunContext
from harness.topology import parse_process_model
from model.ramps import Ramp
from model.results import Case

ROUND_WARMUP_S = 0.5  # the ramp warmed the code paths up already; a round re-warms a server
ROUND_KINDS = ("concurrency", "rate")  # connection ramps hold connections: no rounds


def has_rounds(profile: Profile) -> bool:
    return profile.rounds >= 2 and profile.ramp.kind in ROUND_KINDS


def fixed_ramp(ramp: Ramp, offered: float, duration_s: float) -> Ramp:
    """`ramp` reduced to one step at `offered` (its concurrency, or its req/s) lasting
    about `duration_s`."""
    if ramp.kind == "concurrency":
        level = int(offered)
        return dataclasses.replace(ramp, start=level, stop=level, duration_s=duration_s)
    if ramp.kind == "rate":  # offered is req/s: connections/s × calls per connection
        rate = offered / ramp.calls_per_connection
        connections = max(1, round(rate * duration_s))
        return dataclasses.replace(ramp, low=rate, high=rate, connections_per_step=connections)
    raise ValueError(f"a {ramp.kind} ramp has no confirmation rounds")


def rotated(items: Sequence[Case], by: int) -> list[Case]:
    """`items` started at position `by` (round r runs the cases rotated by r)."""
    if not items:
        return []
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def run_round(run: RunContext, case: Case, index: int) -> Case:
    """Round `index` of `case` (an ok case with a peak): a one-step case at its peak load,
    without verify (the ramp's case verified this server already)."""
    profile = run.profile
    assert case.summary.peak_offered is not None
    round_profile = dataclasses.replace(
        profile,
        ramp=fixed_ramp(profile.ramp, case.summary.peak_offered, profile.round_duration_s),
        warmup_s=min(profile.warmup_s, ROUND_WARMUP_S),
        repeat=1,
    )
    round_run = dataclasses.replace(
        run, plan=dataclasses.replace(run.plan, profile=round_profile, verify=False)
    )
    mode = case.affinity.get("mode") or "both"
    label = f"round {index + 1} of {profile.rounds}"
    model = parse_process_model(case.process_model)
    return run_case(round_run, case.framework, mode, 0, model, label, case.protocol)

"""Confirmation rounds: each framework's peak load measured again, interleaved, for intervals.

The ramp finds where each framework peaks (its best concurrency — the lowest within 5 %
of the best reading, `analysis.rounds_offered`, so that two runs measure one operating
point — or the highest rate it held); a ramp step is one sample, and one sample has no
error bar. Where the ramp's readings at several concurrencies tied (within 15 %), the
first round is tried at each and the rounds go on at the one those longer readings pick
(`tried_round`). So after the ramp,
`profile.rounds` rounds run, each a fresh server, a short warm-up and one fixed-load step
of `profile.round_duration_s` at that framework's peak, every framework once per round and
the order rotated each round (A B C, B C A, C A B …) so that drift and position touch
everyone alike. harness.stats turns the rounds into intervals (analysis.with_rounds).

With a precision (`profile.precision_pct`, `--precision`) `run_rounds` goes on past
`profile.rounds` with the cases not yet precise, lengthens a case's rounds and warm-ups
as its first rounds ask, and stops before the time budget (harness.run.precision).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from harness.profile import Profile
from harness.run.case import run_case
from harness.run.context import RunContext
from harness.run.precision import (
    MORE_ROUNDS_AFTER_LENGTH,
    ROUND_LENGTH_ROUNDS,
    case_precise,
    fit_lengths,
    round_fits,
    round_length_s,
    round_warmup_s,
    still_running,
)
from harness.run.round_figures import rounds_offered, trial_choice, trial_loads, usable_rounds
from harness.topology import parse_process_model
from model.figures import figure
from model.ramps import Ramp
from model.results import Case, Step

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
ROUND_WARMUP_S = 0.5  # the ramp warmed the code paths up already; a round re-warms a server
ROUND_KINDS = ("concurrency", "rate")  # connection ramps hold connections: no rounds


def has_rounds(profile: Profile) -> bool:
    return profile.rounds >= 2 and profile.ramp.kind in ROUND_KINDS


def fixed_ramp(ramp: Ramp, offered: float, duration_s: float) -> Ramp:
    """`ramp` reduced to one step at `offered` (its concurrency, or its req/s) lasting
    about `duration_s`."""
    if ramp.kind == "concurrency":  # one level (a profile's `levels` replaced too)
        level = int(offered)
        return dataclasses.replace(
            ramp, start=0, stop=0, step=0, levels=(level,), duration_s=duration_s
        )
    if ramp.kind == "rate":  # offered is req/s: connections/s × calls per connection
        rate = offered / ramp.calls_per_connection
        connections = max(1, round(rate * duration_s))
        return dataclasses.replace(ramp, low=rate, high=rate, connections_per_step=connections)
    raise ValueError(f"a {ramp.kind} ramp has no confirmation rounds")


def rotated(items: Sequence[T], by: int) -> list[T]:
    """`items` started at position `by` (round r runs the cases rotated by r)."""
    if not items:
        return []
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


def run_round(
    run: RunContext,
    case: Case,
    index: int,
    duration_s: float | None = None,
    warmup_s: float = ROUND_WARMUP_S,
    offered: float | None = None,
    trial: bool = False,
    label: str | None = None,
) -> Case:
    """Round `index` of `case` (an ok case with a peak): a one-step case at `offered` (by
    default its rounds' load, `rounds_offered`) lasting `duration_s` (the profile's round
    length by default) after `warmup_s` of warm-up, without verify (the ramp's case
    verified this server already). A `trial` round (`tried_round`) says its load in its
    label; `label` replaces the round's own ("profiled round")."""
    profile = run.profile
    offered = offered if offered is not None else rounds_offered(case)
    assert offered is not None
    length_s = duration_s or profile.round_duration_s
    # the usual re-warm never exceeds the profile's own warm-up; a longer one, chosen for a
    # server still warming up when its rounds began (precision.round_warmup_s), is kept
    round_profile = dataclasses.replace(
        profile,
        ramp=fixed_ramp(profile.ramp, offered, length_s),
        warmup_s=min(profile.warmup_s, warmup_s) if warmup_s <= ROUND_WARMUP_S else warmup_s,
        repeat=1,
    )
    round_run = dataclasses.replace(
        run, plan=dataclasses.replace(run.plan, profile=round_profile, verify=False)
    )
    mode = case.affinity.get("mode") or "both"
    total = profile.max_rounds if profile.precision_pct else profile.rounds
    label = label or f"round {index + 1} of {'at most ' if profile.precision_pct else ''}{total}"
    if trial:
        label += f", trial at {figure(offered)}"
    model = parse_process_model(case.process_model)
    measured = run_case(round_run, case.framework, mode, 0, model, label, case.protocol)
    steps = tuple(
        dataclasses.replace(s, figures=dataclasses.replace(s.figures, round_s=length_s))
        for s in measured.steps
    )
    return dataclasses.replace(measured, steps=steps)


def tried_round(
    run: RunContext,
    case: Case,
    loads: Sequence[float],
    duration_s: float,
    warmup_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Case, float]:
    """The first round of a case whose ramp readings tied (`analysis.trial_loads`): one
    round at each of `loads`, the one `analysis.trial_choice` picks kept as the round, with
    every trial's reading in its step's `figures.trials`; returns it and its wall seconds. A
    failed trial is left out of the choice; if all failed, the first failure is returned.
    A fresh server per load, as every round: one server stepping through the loads was
    tried and favoured its later, warmer step (a spin server's trial read 103k at 10
    connections and 112k at 20 after it; its rounds at 20 then read 90-102k)."""
    tried: list[tuple[float, Case, float]] = []
    for load in loads:
        began = clock()
        measured = run_round(run, case, 0, duration_s, warmup_s, offered=load, trial=True)
        tried.append((load, measured, clock() - began))
    readings = {load: c.steps[0].achieved for load, c, _ in tried if c.status == "ok" and c.steps}
    if not readings:
        _, failed, wall_s = tried[0]
        return failed, wall_s
    chosen = trial_choice(readings)
    _, kept, wall_s = next(t for t in tried if t[0] == chosen)
    trials = [[load, round(achieved, 1)] for load, achieved in readings.items()]
    step = kept.steps[0]
    step = dataclasses.replace(step, figures=dataclasses.replace(step.figures, trials=trials))
    return dataclasses.replace(kept, steps=(step, *kept.steps[1:])), wall_s


def round_steps(measured: Sequence[tuple[int, Case]]) -> list[Step]:
    """A case's rounds so far as steps carrying their round index (ok rounds only)."""
    return [
        dataclasses.replace(c.steps[0], figures=dataclasses.replace(c.steps[0].figures, round=i))
        for i, c in measured
        if c.status == "ok" and c.steps
    ]


def run_rounds(
    run: RunContext,
    peaked: Mapping[K, Case],
    record: Callable[[K, int, Case], None],
    *,
    started_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Every round of every case in `peaked` (keyed as the runner keys them), interleaved
    and rotated, `record(key, index, round case)` after each. Without a precision:
    `profile.rounds` rounds. With one: at least `profile.rounds`, then only the cases not
    yet precise, until none is left, `max_rounds`, or no case's next round (estimated from
    its rounds so far) would end before `max_time_s` after `started_s` (a `clock()`
    reading; the budget never cuts the minimum). After ROUND_LENGTH_ROUNDS rounds each
    case's round length and warm-up are chosen from its rounds (harness.run.precision)."""
    profile = run.profile
    precision = profile.precision_pct or None
    max_rounds = profile.max_rounds if precision else profile.rounds
    measured: dict[K, list[tuple[int, Case]]] = {key: [] for key in peaked}
    spent: dict[K, list[tuple[float, float]]] = {key: [] for key in peaked}  # (wall, length)
    length_s = {key: profile.round_duration_s for key in peaked}
    warmup_s = {key: ROUND_WARMUP_S for key in peaked}
    offered_at: dict[K, float | None] = {key: None for key in peaked}  # None: rounds_offered
    budget_s = profile.max_time_s or None
    for index in range(max_rounds):
        peaks = {
            key: [s.achieved for s in usable_rounds(round_steps(measured[key]))] for key in peaked
        }
        active = still_running(
            peaks,
            index=index,
            min_rounds=profile.rounds,
            max_rounds=max_rounds,
            precision_pct=precision,
        )
        ran = 0
        for key in rotated(active, index):
            # past the minimum (`rounds`, every case), a case's round runs only if it ends
            # within the budget (estimated from its rounds so far): the last round may run
            # for some cases only. The minimum is not cut: two protocols of twelve servers
            # in quick's 450 s got 2 rounds each, intervals of ±40–540 %
            if (
                index >= max(2, profile.rounds)
                and precision
                and not round_fits(
                    elapsed_s=clock() - started_s,
                    round_cost_s=_round_cost_s(spent[key], length_s[key]),
                    budget_s=budget_s,
                )
            ):
                continue
            began = clock()
            loads = trial_loads(peaked[key]) if index == 0 else []
            if loads:  # the ramp's readings tied: the first round tried at each tied load
                case, wall_s = tried_round(
                    run, peaked[key], loads, length_s[key], warmup_s[key], clock
                )
                if case.status == "ok" and case.steps:
                    offered_at[key] = case.steps[0].offered
            else:
                case = run_round(
                    run, peaked[key], index, length_s[key], warmup_s[key], offered_at[key]
                )
                wall_s = clock() - began
            spent[key].append((wall_s, length_s[key]))
            measured[key].append((index, case))
            record(key, index, case)
            ran += 1
        if not ran:
            break
        if precision and index + 1 == ROUND_LENGTH_ROUNDS:
            _choose_lengths(
                profile, measured, spent, length_s, warmup_s, budget_s, clock() - started_s
            )


def _choose_lengths(
    profile: Profile,
    measured: Mapping[K, Sequence[tuple[int, Case]]],
    spent: Mapping[K, Sequence[tuple[float, float]]],
    length_s: dict[K, float],
    warmup_s: dict[K, float],
    budget_s: float | None,
    elapsed_s: float,
) -> None:
    """After the first rounds: each case not yet precise gets the round length and warm-up
    its rounds ask for (harness.run.precision), shortened alike where the budget would
    leave no room for more rounds once the precise cases have run to the minimum; a
    precise case keeps the profile's length."""
    base_s = profile.round_duration_s
    overheads = {
        key: statistics.fmean(w - d for w, d in spent[key]) if spent[key] else 0.0
        for key in measured
    }
    steps = {key: round_steps(measured[key]) for key in measured}
    precise = {
        key
        for key in measured
        if case_precise([s.achieved for s in usable_rounds(steps[key])], profile.precision_pct)
    }
    chosen = {}
    for key in measured:
        warmup_s[key] = round_warmup_s(
            steps[key], base_s=ROUND_WARMUP_S, profile_warmup_s=profile.warmup_s
        )
        if key not in precise:
            chosen[key] = round_length_s(steps[key], base_s=base_s, overhead_s=overheads[key])
    to_minimum = max(0, profile.rounds - ROUND_LENGTH_ROUNDS)
    remaining_s = None
    if budget_s:
        precise_s = to_minimum * sum(overheads[key] + base_s for key in precise)
        remaining_s = budget_s - elapsed_s - precise_s
    length_s.update(
        fit_lengths(
            chosen,
            overheads,
            base_s=base_s,
            remaining_s=remaining_s,
            more_rounds=max(MORE_ROUNDS_AFTER_LENGTH, to_minimum),
        )
    )


def _round_cost_s(spent: Sequence[tuple[float, float]], length_s: float) -> float:
    """A case's next round in seconds: its rounds' wall time so far beyond their length,
    plus the next one's length (a case with no round yet: twice its length)."""
    if not spent:
        return 2 * length_s
    return statistics.fmean(wall - length for wall, length in spent) + length_s

"""Rounds until the estimate is stable: the stopping rule, the round length, outlier rounds
and where the noise comes from (pure: no server, no clock, unit-tested without a network).

pyperf and asv spend their time where the noise is; so do confirmation rounds with a
precision (`--precision PCT`, harness.run.rounds.run_rounds):

- **stopping** (`case_precise`, `round_fits`): after the ramp, rounds go on, interleaved
  across cases as before, and a case stops once its peak's 95 % interval half-width is
  within PCT % of its mean over at least MIN_PRECISE_ROUNDS usable rounds. The run stops
  when every case is precise, the profile's `max_rounds` is reached, or the next round
  would not fit in the time budget (`--max-time`, estimated from the rounds so far).
  A case that stops short is `imprecise`, with the width it reached.
- **round length** (`round_length_s`): from the first rounds' per-second replies
  (the server's telemetry `requests` counter, `figures.replies_per_s`). A round's mean
  varies from two sources: how the server settles at each start (`a`, which no length
  changes) and what its per-second rate does within the round (`c / d` for a round of
  `d` seconds: GC, timers, telemetry, any periodic work not averaged out). Rounds cost
  `d + overhead_s` each (start, warm-up), and `n` rounds give a variance `(a + c/d) / n`,
  so the time to a given precision is least at `d = sqrt(c · overhead_s / a)`, clamped to
  [the profile's length, ROUND_LENGTH_CAP × it]: rounds lengthen only when the wander
  within them explains the spread between them. Periodic work slower than a round (a
  dip in some of the first rounds, not all: `periodic_dip_s`) sets the length to one
  period, so that every round catches as many dips as the next.
- **outliers** (`round_exclusions`): a round is kept out, its reason recorded in the
  case (`rounds_excluded`), when it was `contended` (others used the server's or the
  load's CPUs) or it ran into a stall (a second with replies below STALL_FRACTION of the
  round's median).
  Stalls in more than STALL_OWN_FRACTION of the rounds are the server's own (a GC pause
  it always has) and are kept. Never silently: each exclusion names its round and why;
  with fewer than two rounds left none is excluded and the case says so
  (`exclusion_note`).
- **noise source** (`noise_source`): for an imprecise case, which of the machine (other
  processes' CPU), the load generator, or the server itself (per-second replies wandering
  within rounds, or settling differently at each start) the spread comes from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.stats import mean_interval
from model.results import Step

K = TypeVar("K")
MIN_PRECISE_ROUNDS = 3  # an interval on two rounds is too wide to trust as "precise"
STALL_FRACTION = 0.5  # a second below half the round's median per-second replies
STALL_OWN_FRACTION = 0.25  # stalls in more rounds than this are the server's own: kept
ROUND_LENGTH_CAP = 4.0  # rounds lengthen at most to 4 × the profile's round length
ROUND_LENGTH_ROUNDS = 3  # the first rounds whose spread chooses the length
MACHINE_FRACTION = 1 / 3  # the machine or the driver is named when it touched ≥ 1/3 rounds
SERVER_WANDER_PCT = 3.0  # per-second replies wandering more than this within a round
# what excludes a round, by step flag. Not driver_bound: a case the load generator limits
# (nginx on one wrk core) is limited in most rounds, and keeping only the others would
# bias its figure; its rounds all count and the noise source names the driver.
EXCLUDING_FLAGS = {
    "contended": "contended: other processes used the server's or the load's CPUs",
}


def half_width_pct(values: Sequence[float]) -> float | None:
    """The 95 % t interval's half-width on the mean of `values`, in % of the mean; None
    with fewer than two values or a mean of zero."""
    interval = mean_interval(values)
    if interval is None or interval.value <= 0:
        return None
    return 100.0 * (interval.high - interval.value) / interval.value


def case_precise(values: Sequence[float], precision_pct: float) -> bool:
    """Enough usable rounds (≥ MIN_PRECISE_ROUNDS) and the half-width within
    `precision_pct` % of the mean."""
    width = half_width_pct(values)
    return len(values) >= MIN_PRECISE_ROUNDS and width is not None and width <= precision_pct


def rounds_needed(values: Sequence[float], precision_pct: float) -> int | None:
    """About how many rounds in all the case needs for `precision_pct`, from the spread so
    far (the half-width falls as 1/sqrt(n)); None with fewer than two rounds."""
    width = half_width_pct(values)
    if width is None:
        return None
    if width <= precision_pct:
        return max(len(values), MIN_PRECISE_ROUNDS)
    return max(MIN_PRECISE_ROUNDS, math.ceil(len(values) * (width / precision_pct) ** 2))


def round_fits(*, elapsed_s: float, round_cost_s: float, budget_s: float | None) -> bool:
    """Whether a round estimated to take `round_cost_s` (every case still running, by its
    rounds so far) ends before `budget_s` (None: no budget) from the run's start."""
    return budget_s is None or elapsed_s + round_cost_s <= budget_s


def per_second_spread(steps: Sequence[Step]) -> tuple[float, float] | None:
    """(variance within rounds, seconds per round): the mean over `steps` of each round's
    per-second replies' variance, and the mean count of those seconds; None when no
    round has two per-second readings (a server without telemetry)."""
    variances, lengths = [], []
    for step in steps:
        rates = step.figures.replies_per_s or []
        if len(rates) >= 2:
            variances.append(statistics.variance(rates))
            lengths.append(len(rates))
    if not variances:
        return None
    return statistics.fmean(variances), statistics.fmean(lengths)


def round_length_s(
    steps: Sequence[Step], *, base_s: float, overhead_s: float, cap: float = ROUND_LENGTH_CAP
) -> float:
    """The round length for the rounds after the first (module docstring): from the first
    rounds' spread between them and their per-second spread within, the length that
    reaches a precision soonest given `overhead_s` per round, within [base_s, cap × base_s],
    in whole seconds (wrk takes no fraction: `-d5.8s` is a usage error); `base_s` when
    there is too little to go on."""
    peaks = [s.achieved for s in steps]
    spread = per_second_spread(steps)
    if len(peaks) < 2 or spread is None:
        return base_s
    period_s = periodic_dip_s(steps)
    if period_s is not None:  # periodic work slower than a round: cover one period
        return whole_seconds(min(cap * base_s, max(base_s, period_s)))
    within_var, seconds = spread
    between_var = statistics.variance(peaks)
    # the part of a round mean's variance the per-second wander explains, c/d; c per second
    # (per-second values are not independent: a slow period spans several, so the wander's
    # share is at least this, and a longer round averages it away)
    c = within_var  # variance of a one-second mean; a d-second mean has c / d
    explained = c / seconds
    settle = max(between_var - explained, 0.0)  # start-to-start: no length changes it
    if settle <= 0:
        return whole_seconds(cap * base_s)
    best = math.sqrt(c * max(overhead_s, 0.0) / settle)
    return whole_seconds(min(cap * base_s, max(base_s, best)))


def whole_seconds(seconds: float) -> float:
    """`seconds` rounded up to a whole second (5.8 → 6.0; 6.0 stays)."""
    return float(math.ceil(round(seconds, 6)))


DIP_FRACTION = 0.85  # a second below 85 % of its round's median: a dip (GC, a timer)


def periodic_dip_s(steps: Sequence[Step]) -> float | None:
    """How often a dip comes when it comes less than once a round: with dips (a second
    below DIP_FRACTION of its round's median) in some of the rounds but not all, a dip
    every `seconds per round × rounds / rounds with one` s, which a round must cover to
    catch as many dips as the next; None when every round or none has one."""
    judged = [s for s in steps if len(s.figures.replies_per_s or []) >= 2]
    if len(judged) < 2:
        return None
    dipped = 0
    for step in judged:
        rates = step.figures.replies_per_s
        middle = statistics.median(rates)
        dipped += any(rate < DIP_FRACTION * middle for rate in rates)
    if dipped in (0, len(judged)):
        return None
    seconds = statistics.fmean(len(s.figures.replies_per_s) + 1 for s in judged)
    return seconds * len(judged) / dipped


def stalled_seconds(step: Step) -> list[int]:
    """The seconds (0-based within the round) whose replies were below STALL_FRACTION of
    the round's median per-second replies."""
    rates = step.figures.replies_per_s or []
    if len(rates) < 2:
        return []
    middle = statistics.median(rates)
    return [i for i, rate in enumerate(rates) if rate < STALL_FRACTION * middle]


@dataclass(frozen=True)
class Exclusion:
    """A round kept out of a case's figures, and why."""

    round: int  # 0-based, as the step's figures.round
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"round": self.round, "reason": self.reason}


def round_exclusions(rounds: Sequence[Step]) -> list[Exclusion]:
    """The rounds to keep out, each with its reason (module docstring); none when fewer
    than two rounds would be left. `rounds` carry their index in `figures.round`."""
    stalls = {i: stalled_seconds(s) for i, s in enumerate(rounds)}
    stalled = [i for i, seconds in stalls.items() if seconds]
    server_stalls = len(stalled) > STALL_OWN_FRACTION * len(rounds)
    excluded = []
    for i, step in enumerate(rounds):
        reasons = [text for flag, text in EXCLUDING_FLAGS.items() if flag in step.flags]
        if stalls[i] and not server_stalls:
            rates = step.figures.replies_per_s
            worst = min(rates[j] for j in stalls[i])
            middle = statistics.median(rates)
            reasons.append(
                f"stall: {len(stalls[i])} s below {STALL_FRACTION * 100:.0f} % of the round's "
                f"median ({worst:,.0f} against {middle:,.0f} replies/s)"
            )
        if reasons:
            excluded.append(
                Exclusion(
                    step.figures.round if step.figures.round is not None else i, "; ".join(reasons)
                )
            )
    if len(rounds) - len(excluded) < 2:
        return []
    return excluded


def exclusion_note(rounds: Sequence[Step]) -> str | None:
    """A note when rounds that would be kept out were kept because fewer than two would be
    left (every round contended, say); None otherwise."""
    if round_exclusions(rounds):
        return None
    outliers = [s for s in rounds if any(flag in s.flags for flag in EXCLUDING_FLAGS)]
    if not outliers:
        return None
    return (
        f"{len(outliers)} of {len(rounds)} rounds were contended: too few others to leave "
        "them out, all kept"
    )


def stall_note(rounds: Sequence[Step]) -> str | None:
    """A note when stalls are the server's own (in more than STALL_OWN_FRACTION of the
    rounds) and so are kept; None otherwise."""
    stalled = sum(bool(stalled_seconds(s)) for s in rounds)
    if rounds and stalled > STALL_OWN_FRACTION * len(rounds):
        return (
            f"stalls (a second below {STALL_FRACTION * 100:.0f} % of the round's median) in "
            f"{stalled} of {len(rounds)} rounds: the server's own, kept"
        )
    return None


def _share(rounds: Sequence[Step], test: object) -> int:
    return sum(bool(test(s)) for s in rounds)  # type: ignore[operator]


def _machine(step: Step) -> bool:
    return bool({"contended", "cpu_contended"} & set(step.flags))


def _load_generator(step: Step) -> bool:
    wait = step.figures.agent_cpu_wait_pct
    return bool({"driver_bound", "driver_capped"} & set(step.flags)) or (
        wait is not None and wait >= 10.0
    )


def _other_cpu(step: Step) -> float:
    others: Mapping[str, float] = step.figures.other_cpu_pct or {}
    return max(others.values(), default=0.0)


def noise_source(rounds: Sequence[Step], used: Sequence[Step] | None = None) -> tuple[str, str]:
    """(source, reason): where a case's spread comes from, asked of every round it ran
    (`rounds`, those kept out as contended too: a case left with two rounds because the
    machine took the others is imprecise through the machine) and, for the server's own
    variation, of the rounds that count (`used`; default all), in this order —

    - `machine`: at least a third of the rounds were `contended` or `cpu_contended`;
    - `load generator`: at least a third were `driver_bound`, `driver_capped`, or the
      driver waited ≥ 10 % of a core for its CPU;
    - `server`: its per-second replies wander within rounds (more than
      SERVER_WANDER_PCT %), or they are steady within rounds and it settles at a
      different rate at each start;
    - `unknown`: none of these can be read (a server without telemetry, quiet rounds).
    """
    n = len(rounds)
    if n == 0:
        return "unknown", "no rounds"
    machine = _share(rounds, _machine)
    if machine >= MACHINE_FRACTION * n:
        worst = max(_other_cpu(s) for s in rounds)
        return "machine", (
            f"the machine: other processes used the server's or the load's CPUs in "
            f"{machine} of {n} rounds (up to {worst:.0f} % of a core)"
        )
    driver = _share(rounds, _load_generator)
    if driver >= MACHINE_FRACTION * n:
        return "load generator", (
            f"the load generator: it limited or waited for its CPUs in {driver} of {n} rounds"
        )
    counted = list(used) if used else list(rounds)
    spread = per_second_spread(counted)
    if spread is None:
        return "unknown", (
            "not attributed: no round has two per-second readings (a server without "
            "telemetry, or rounds too short)"
        )
    mean_rate = statistics.fmean(s.achieved for s in counted) or 1.0
    wander_pct = 100.0 * math.sqrt(spread[0]) / mean_rate
    if wander_pct > SERVER_WANDER_PCT:
        return "server", (
            f"the server's own variation: its per-second replies wander ±{wander_pct:.1f} % "
            "within a round"
        )
    return "server", (
        f"the server's own variation: steady within a round (±{wander_pct:.1f} % per second) "
        "but settling at a different rate at each start"
    )


def imprecise_reason(width_pct: float | None, rounds: int, precision_pct: float) -> str:
    """Why a case stopped short of its precision, as the summary says it."""
    reached = f"±{width_pct:.1f} %" if width_pct is not None else "no interval"
    return f"{reached} after {rounds} round{'s' if rounds != 1 else ''}, asked ±{precision_pct:g} %"


WARMING_FRACTION = 0.9  # a round's first second below 90 % of its rest: still warming up
ROUND_WARMUP_CAP_S = 3.0


def still_warming(steps: Sequence[Step]) -> bool:
    """Whether the server was still warming up when its rounds began: in at least half of
    the rounds with per-second replies, the first whole second fell below
    WARMING_FRACTION of the median of the rest (JITs, caches, pools settling)."""
    readings = [s.figures.replies_per_s or [] for s in steps]
    judged = [r for r in readings if len(r) >= 3]
    if not judged:
        return False
    slow = sum(r[0] < WARMING_FRACTION * statistics.median(r[1:]) for r in judged)
    return slow >= len(judged) / 2


def round_warmup_s(steps: Sequence[Step], *, base_s: float, profile_warmup_s: float) -> float:
    """The warm-up before a round: `base_s`, or for a server `still_warming` after it, the
    profile's whole warm-up (at least 1 s, at most ROUND_WARMUP_CAP_S)."""
    if not still_warming(steps):
        return base_s
    return min(ROUND_WARMUP_CAP_S, max(1.0, profile_warmup_s, 2 * base_s))


def still_running(
    values: Mapping[K, Sequence[float]],
    *,
    index: int,
    min_rounds: int,
    max_rounds: int,
    precision_pct: float | None,
) -> list[K]:
    """The cases (keys of `values`: each case's usable round peaks so far) that run round
    `index` (0-based): every case until `min_rounds`; after that, without a precision
    none, with one those not yet `case_precise`; none from `max_rounds` on."""
    if index >= max_rounds:
        return []
    if index < min_rounds:
        return list(values)
    if not precision_pct:
        return []
    return [key for key, peaks in values.items() if not case_precise(peaks, precision_pct)]


MORE_ROUNDS_AFTER_LENGTH = 2  # lengthened rounds must leave room for this many more


def fit_lengths(
    chosen_s: Mapping[K, float],
    overhead_s: Mapping[K, float],
    *,
    base_s: float,
    remaining_s: float | None,
    more_rounds: int = MORE_ROUNDS_AFTER_LENGTH,
) -> dict[K, float]:
    """The chosen round lengths, shortened alike toward `base_s` so that `more_rounds`
    rounds of every case still fit in `remaining_s` of the budget (None: no budget): a
    longer round that leaves no time for another measures less, not more."""
    if remaining_s is None or not chosen_s:
        return dict(chosen_s)

    def cost_s(fraction: float) -> float:
        return more_rounds * sum(
            overhead_s.get(key, 0.0) + base_s + fraction * (length - base_s)
            for key, length in chosen_s.items()
        )

    if cost_s(1.0) <= remaining_s:
        return dict(chosen_s)
    extra_s = sum(length - base_s for length in chosen_s.values())
    fraction = (remaining_s - cost_s(0.0)) / (more_rounds * extra_s) if extra_s > 0 else 0.0
    fraction = min(1.0, max(0.0, fraction))
    return {
        key: round(base_s + fraction * (length - base_s), 1) for key, length in chosen_s.items()
    }

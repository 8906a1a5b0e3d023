"""`harness diff`: the same cases in two runs, the change in each and whether it is real.

Run A is the old (the base), run B the new. For every case in both runs, matched on
framework, scenario, sink, driver, process model, affinity mode and protocol (a run from
before protocols were an axis is all h1):

- **the ratio** B / A of the peaks — the means of the two runs' usable confirmation rounds
  (harness.run.analysis.usable_rounds) — with a 95 % percentile-bootstrap interval, each
  run's rounds resampled on their own (harness.stats.bootstrap_ratio_interval: rounds of
  two runs did not run side by side, so they are not paired);
- **the test**: Welch's two-sided t test on the logs of the two runs' round peaks
  (harness.stats.welch_log_p), its p **adjusted for the diff's number of cases** by
  Holm's method (harness.stats.holm_adjusted; `p` and `p_adjusted` in the JSON). A diff
  tests every case at once: two runs of one commit with 13 cases, each tested at 0.05,
  show a false change in about half of all diffs (1 − 0.95¹³ = 0.49; this machine's
  quick compares did, eventmachine "slower" at p 0.032 between two runs of one commit).
  The rank test used before (Mann–Whitney) cannot be adjusted on a handful of rounds:
  its smallest p with 4 a side is 0.029, times 13 above any threshold;
- **the verdict**: `faster` or `slower` when the adjusted p < 0.05 **and** the ratio's
  interval excludes 1.0; `no significant change` otherwise (the note gives a raw p under
  0.05 that the adjustment lifted). Both, because each alone errs on few rounds: the
  percentile bootstrap of 5 rounds is narrower than it should be (it cannot see the
  spread the rounds did not happen to show), and the test says nothing of the size.
  `no rounds` when either side has fewer than two rounds (then the ratio of the two
  peaks alone, with no interval and no verdict); `not comparable` when either case
  failed or found no peak.

A run to a precision (`--precision`) has rounds until each case's interval is narrow
enough, so a real change of that size is told apart; a case that stopped short
(`imprecise`) is named in the note of a `no significant change`: its width, not the
absence of a change, may be why.

p99 and CPU per request are adjusted alike, each over its own family of cases.

**The machine's drift** (harness.diff_drift): the baselines' median ratio B / A, always
reported; with `harness diff --machine-drift` each other case's B rounds are divided by it.

`factor` (default 1.10) is the change that matters: a significant change beyond it
either way (B/A < 1/factor or > factor) is marked, and one slower beyond it makes the
exit status 1 (`RunDiff.exit_status`). The p99 latency at the peak (lower is better) is
given beside, judged alike, for information only: it never sets the exit status.

Pure functions of results (no I/O), unit-tested on synthetic runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.diff_change import ALPHA as ALPHA
from harness.diff_change import Change as Change
from harness.diff_change import lower_or_higher as lower_or_higher
from harness.diff_change import measure_change as measure_change
from harness.diff_drift import MIN_DRIFT_BASELINES as MIN_DRIFT_BASELINES
from harness.diff_drift import MachineDrift as MachineDrift
from harness.diff_drift import is_baseline, machine_drift, not_comparable
from harness.run.analysis import usable_rounds
from harness.stats import holm_adjusted
from model.figures import figure
from model.results import Case, Run

RULE = (
    f"Welch's t on the rounds' logs, p adjusted for the diff's cases (Holm) < {ALPHA}, "
    "and the ratio's 95 % bootstrap interval excludes 1"
)
DEFAULT_FACTOR = 1.10
# the host facts two runs must share to be diffed (or trended) without --allow-other-host
SAME_HOST_FACTS = ("hostname", "cpu_model", "cores")
IDENTITY_KEYS = (
    "framework",
    "scenario",
    "sink",
    "driver",
    "process_model",
    "affinity",
    "protocol",
)

CaseIdentity = tuple[str, str, str, str, str, str, str]


def case_labels(identities: Sequence[CaseIdentity]) -> dict[CaseIdentity, str]:
    """Each case as its framework, followed by only those other parts that vary
    (`aiohttp`, or `aiohttp [lb:2, server]` in a run of several process models and modes,
    `aiohttp [h1-tls]` in one of several protocols)."""
    varying = [i for i in range(1, len(IDENTITY_KEYS)) if len({x[i] for x in identities}) > 1]
    labels = {}
    for identity in identities:
        extra = ", ".join(identity[i] for i in varying)
        labels[identity] = identity[0] + (f" [{extra}]" if extra else "")
    return labels


def host_differences(first: Run, second: Run) -> list[str]:
    """The SAME_HOST_FACTS on which two runs differ, each as `fact: 'a' vs 'b'`."""
    return [
        f"{fact}: {first.host.get(fact)!r} vs {second.host.get(fact)!r}"
        for fact in SAME_HOST_FACTS
        if first.host.get(fact) != second.host.get(fact)
    ]


LIMIT_KEYS = ("cpu_quota", "memory_max_bytes")  # run.config: what a run held its servers to


def limit_differences(first: Run, second: Run) -> list[str]:
    """The limits (`--cpu-quota`, `--memory-max`) on which two runs differ, each as
    `key: a vs b` (None: no limit)."""
    return [
        f"{key}: {first.config.get(key)!r} vs {second.config.get(key)!r}"
        for key in LIMIT_KEYS
        if first.config.get(key) != second.config.get(key)
    ]


def _round_peaks(case: Case) -> list[float]:
    return [s.achieved for s in usable_rounds(case.rounds)]


def _round_p99s(case: Case) -> list[float]:
    return [v for s in usable_rounds(case.rounds) if (v := s.latency_ms.get("p99")) is not None]


def _round_cpu_us(case: Case) -> list[float]:
    return [v for s in usable_rounds(case.rounds) if (v := s.cpu_us_per_req) is not None]


def _memory_peak_mb(case: Case) -> float | None:
    peak = case.summary.memory_peak_bytes
    return peak / 1e6 if peak is not None else None


@dataclass(frozen=True)
class CaseDiff:
    """One case in both runs: the peak's change and verdict, the p99's change beside."""

    identity: CaseIdentity
    label: str
    peak: Change
    p99: Change
    verdict: str  # faster, slower, no significant change, no rounds, not comparable
    beyond_factor: bool  # significant and beyond the factor, either way
    note: str | None = None  # why there is no verdict, or why none could be significant
    # each run's peak half-width, % of its peak (harness.run.precision); None: no interval
    half_width_pct: tuple[float | None, float | None] = (None, None)
    # the server's CPU per reply (its rounds') and memory peak (harness.cgroups), beside
    cpu_us_per_req: Change | None = None
    memory_peak_mb: Change | None = None

    @property
    def worse_beyond_factor(self) -> bool:
        return self.verdict == "slower" and self.beyond_factor

    @property
    def p99_change(self) -> str:
        """The p99's change in words (lower is better; informational)."""
        return lower_or_higher(self.p99)

    def to_dict(self) -> dict[str, Any]:
        return {
            **dict(zip(IDENTITY_KEYS, self.identity, strict=True)),
            "label": self.label,
            "verdict": self.verdict,
            "beyond_factor": self.beyond_factor,
            "peak": self.peak.to_dict(),
            "p99_ms": {**self.p99.to_dict(), "change": self.p99_change},
            "cpu_us_per_req": (
                {**self.cpu_us_per_req.to_dict(), "change": lower_or_higher(self.cpu_us_per_req)}
                if self.cpu_us_per_req is not None
                else None
            ),
            "memory_peak_mb": (
                self.memory_peak_mb.to_dict() if self.memory_peak_mb is not None else None
            ),
            "note": self.note,
            "half_width_pct": {"a": self.half_width_pct[0], "b": self.half_width_pct[1]},
        }


FIGURES = ("peak", "p99", "cpu")  # the figures tested, each adjusted over its own family


def diff_case(
    old: Case,
    new: Case,
    label: str,
    factor: float,
    drift: float = 1.0,
    adjusted: dict[str, float | None] | None = None,
    family: int = 1,
) -> CaseDiff:
    """`old` against `new` (the same case in runs A and B), by the module's rule; `drift`
    (the machine's, MachineDrift) divides B's round peaks first. `adjusted`: each
    figure's p adjusted over the diff's `family` of cases (`diff_runs`); without it the
    raw p decides (a diff of one case)."""
    adjusted = adjusted or {}
    identity = old.identity
    sides = (("A", old), ("B", new))
    why = [f"{side}: {reason}" for side, case in sides if (reason := not_comparable(case))]
    if why:
        empty = Change(old.summary.peak, new.summary.peak, None, None, None, (0, 0))
        return CaseDiff(identity, label, empty, empty, "not comparable", False, "; ".join(why))
    new_rounds = [value / drift for value in _round_peaks(new)]
    peak = measure_change(old.summary.peak, new.summary.peak, _round_peaks(old), new_rounds)
    if drift != 1.0 and not peak.measured and peak.ratio is not None:
        peak = dataclasses.replace(peak, ratio=peak.ratio / drift)
    p99 = measure_change(
        old.summary.p99_at_peak_ms, new.summary.p99_at_peak_ms, _round_p99s(old), _round_p99s(new)
    )
    cpu = measure_change(
        old.summary.cpu_us_per_req, new.summary.cpu_us_per_req, _round_cpu_us(old),
        _round_cpu_us(new),
    )  # fmt: skip
    peak, p99, cpu = (
        dataclasses.replace(change, p_adjusted=adjusted.get(name))
        for name, change in zip(FIGURES, (peak, p99, cpu), strict=True)
    )
    note = None
    if not peak.measured:
        verdict = "no rounds"
        note = f"{peak.rounds[0]} and {peak.rounds[1]} rounds: the peaks' ratio, no interval"
    elif peak.significant:
        verdict = "faster" if (peak.ratio or 0) > 1 else "slower"
    else:
        verdict = "no significant change"
        if peak.p is not None and peak.p < ALPHA and peak.p_adjusted is not None:
            note = (
                f"p {peak.p:.3f} alone, {peak.p_adjusted:.3f} adjusted for the diff's "
                f"{family} cases (Holm)"
            )
    imprecise = [
        f"{side} imprecise ({case.summary.imprecise_reason})"
        for side, case in sides
        if case.summary.imprecise_reason is not None
    ]
    if imprecise and verdict == "no significant change":
        note = "; ".join(filter(None, (note, *imprecise)))
    if old.summary.peak_offered != new.summary.peak_offered:
        moved = (
            f"measured at different loads (offered {figure(old.summary.peak_offered)} in "
            f"A, {figure(new.summary.peak_offered)} in B): two operating points"
        )
        note = f"{note}; {moved}" if note else moved
    if drift != 1.0:
        adjusted = f"B's rounds divided by the machine's drift ({drift:.3f}×)"
        note = f"{note}; {adjusted}" if note else adjusted
    ratio = peak.ratio or 1.0
    beyond = peak.significant and (ratio < 1 / factor or ratio > factor)
    widths = (old.summary.half_width_pct, new.summary.half_width_pct)
    memory = measure_change(_memory_peak_mb(old), _memory_peak_mb(new), (), ())
    return CaseDiff(identity, label, peak, p99, verdict, beyond, note, widths, cpu, memory)


@dataclass(frozen=True)
class RunDiff:
    """Run A against run B, case by case."""

    old_id: str
    new_id: str
    factor: float
    other_host: tuple[str, ...]  # the host facts that differ (empty: the same host)
    cases: tuple[CaseDiff, ...]
    only_in_old: tuple[str, ...]
    only_in_new: tuple[str, ...]
    drift: MachineDrift | None = None  # None: fewer than MIN_DRIFT_BASELINES baselines
    other_limits: tuple[str, ...] = ()  # the limits that differ: a change they may explain
    pairs: tuple[tuple[str, str], ...] = ()  # --pair: A's framework against B's; () the same

    @property
    def worse(self) -> list[CaseDiff]:
        """The cases significantly slower by more than the factor."""
        return [c for c in self.cases if c.worse_beyond_factor]

    @property
    def exit_status(self) -> int:
        """1 when any case got significantly slower beyond the factor, else 0."""
        return 1 if self.worse else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.old_id,
            "b": self.new_id,
            "factor": self.factor,
            "rule": RULE,
            "other_host": list(self.other_host),
            "other_limits": list(self.other_limits),
            "cases": [c.to_dict() for c in self.cases],
            "only_in_a": list(self.only_in_old),
            "only_in_b": list(self.only_in_new),
            "machine_drift": self.drift.to_dict() if self.drift else None,
            "pairs": [f"{a}={b}" for a, b in self.pairs],
            "worse_beyond_factor": [c.label for c in self.worse],
            "exit_status": self.exit_status,
        }


def _tested_p(case: CaseDiff, figure: str) -> float | None:
    """The raw p of one of FIGURES in `case`, None when that figure was not tested."""
    change = {"peak": case.peak, "p99": case.p99, "cpu": case.cpu_us_per_req}[figure]
    return change.p if change is not None and change.measured else None


def parse_pair(text: str) -> tuple[str, str]:
    """`--pair A=B`: the framework of run A's case and the framework of run B's case
    compared with it (`aiohttp=aiohttp-uvloop`; both may be the same run)."""
    a, sep, b = text.partition("=")
    if not sep or not a.strip() or not b.strip() or "=" in b:
        raise ValueError(f"--pair takes two case names, A=B (e.g. spin=spin-slow), not {text!r}")
    return a.strip(), b.strip()


def _paired_cases(
    old_cases: dict[CaseIdentity, Case],
    new_cases: dict[CaseIdentity, Case],
    pairs: Sequence[tuple[str, str]],
) -> list[tuple[Case, Case, str]]:
    """Run A's cases of each pair's first framework against run B's of its second, alike
    in every other part of their identity (scenario, sink, ... protocol)."""
    labels = case_labels(list(old_cases))
    matched: list[tuple[Case, Case, str]] = []
    for a, b in pairs:
        found = [
            (old_cases[i], new_cases[(b, *i[1:])], labels[i].replace(a, f"{a} → {b}", 1))
            for i in old_cases
            if i[0] == a and (b, *i[1:]) in new_cases
        ]
        if not found:
            raise ValueError(
                f"--pair {a}={b}: no case of {a} in run A has a case of {b} in run B "
                "alike in scenario, sink, driver, process model, affinity and protocol"
            )
        matched.extend(found)
    return matched


def diff_runs(
    old: Run,
    new: Run,
    factor: float = DEFAULT_FACTOR,
    machine_drift_applied: bool = False,
    pairs: Sequence[tuple[str, str]] = (),
) -> RunDiff:
    """Every case of both runs compared, in run A's order; the cases in only one are named.
    The machine's drift (from the baselines) is reported, and with `machine_drift_applied`
    divides the other cases' B rounds.

    With `pairs` ((framework in A, framework in B), `parse_pair`) only those cases are
    compared, one framework's against another's: two servers of one run (interleaved
    round by round, so a drift of the machine falls on both) or of two runs."""
    if not factor >= 1.0:
        raise ValueError(f"factor must be at least 1.0, not {factor}")
    old_cases = {c.identity: c for c in old.cases}
    new_cases = {c.identity: c for c in new.cases}
    if pairs:
        matched = _paired_cases(old_cases, new_cases, pairs)
        paired = _diff_pairs(old, new, factor, matched, machine_drift_applied)
        return dataclasses.replace(paired, pairs=tuple(pairs))
    labels = case_labels([*old_cases, *(i for i in new_cases if i not in old_cases)])
    compared = [(old_cases[i], new_cases[i], labels[i]) for i in old_cases if i in new_cases]
    return _diff_pairs(
        old,
        new,
        factor,
        compared,
        machine_drift_applied,
        tuple(labels[i] for i in old_cases if i not in new_cases),
        tuple(labels[i] for i in new_cases if i not in old_cases),
    )


def _diff_pairs(
    old: Run,
    new: Run,
    factor: float,
    pairs: list[tuple[Case, Case, str]],
    machine_drift_applied: bool = False,
    only_in_old: tuple[str, ...] = (),
    only_in_new: tuple[str, ...] = (),
) -> RunDiff:
    """The RunDiff of `pairs` (A's case, B's case, label), their p adjusted together."""
    drift = machine_drift(pairs, machine_drift_applied)
    by = drift.factor if drift is not None and drift.applied else 1.0
    drifts = [1.0 if is_baseline(a) else by for a, _, _ in pairs]
    # two passes: each case's raw p first, then every figure's family adjusted (Holm)
    raw = [
        diff_case(a, b, label, factor, d) for (a, b, label), d in zip(pairs, drifts, strict=True)
    ]
    families = {name: holm_adjusted([_tested_p(c, name) for c in raw]) for name in FIGURES}
    tested = sum(p is not None for p in families["peak"])
    cases = tuple(
        diff_case(a, b, label, factor, d, {n: families[n][i] for n in FIGURES}, tested)
        for i, ((a, b, label), d) in enumerate(zip(pairs, drifts, strict=True))
    )
    return RunDiff(
        old.run_id,
        new.run_id,
        factor,
        tuple(host_differences(old, new)),
        cases,
        only_in_old,
        only_in_new,
        drift,
        tuple(limit_differences(old, new)),
    )

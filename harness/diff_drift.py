"""The machine's drift between two runs, read from the baselines.

This machine's speed moves between runs (2× between days, some per cent within an hour),
and every case moves with it. The baselines (nginx, Node, EventMachine: not the
frameworks under study) measure that: when both runs have at least MIN_DRIFT_BASELINES of
them with a peak, the median of their peaks' ratios B / A is the machine's drift, always
reported. With `harness diff --machine-drift` each other case's B rounds are divided by
it before the ratio, the interval and the test; the baselines are judged raw and p99 is
never adjusted. Not the default: the servers do not all feel a drift alike (two quick
runs here, the baselines 1.14–1.23× faster, the median 1.19×: gevent 1.30×, aiohttp
1.30×, tornado 1.01×), and the interval does not carry the drift's own uncertainty, so an
adjusted verdict is surer than it should be.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from model.results import Case

MIN_DRIFT_BASELINES = 2  # one baseline's own noise (±10 % here) would move every verdict


def not_comparable(case: Case) -> str | None:
    """Why a case has nothing to compare (failed, skipped, no peak); None when it has."""
    if case.status != "ok":
        return f"{case.status} ({case.error})"
    return None if case.summary.peak else "no peak"


@dataclass(frozen=True)
class MachineDrift:
    """How much the machine moved between runs A and B, read from the baselines."""

    factor: float  # the median of the baselines' peak ratios B / A
    baselines: tuple[tuple[str, float], ...]  # (label, its ratio B / A)
    applied: bool  # the other cases' B rounds divided by it (False: --no-machine-drift)

    def text(self) -> str:
        """`the machine moved 1.19× (the baselines' median: nginx 1.14×, …)`."""
        each = ", ".join(f"{label} {ratio:.2f}×" for label, ratio in self.baselines)
        how = (
            "the frameworks are judged against it"
            if self.applied
            else "the frameworks' ratios are raw (--machine-drift judges them against it)"
        )
        return f"the machine moved {self.factor:.3f}× (the baselines' median: {each}): {how}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "factor": round(self.factor, 4),
            "baselines": {label: round(ratio, 4) for label, ratio in self.baselines},
            "applied": self.applied,
        }


def is_baseline(case: Case) -> bool:
    """Whether `case` is a baseline's (nginx, Node, EventMachine: not under study)."""
    return case.summary.role == "baseline"


def machine_drift(
    pairs: Sequence[tuple[Case, Case, str]], apply: bool = False
) -> MachineDrift | None:
    """The drift from the baselines among `pairs` (case in A, case in B, label), by the
    module's rule; None with fewer than MIN_DRIFT_BASELINES comparable ones."""
    ratios = [
        (label, new.summary.peak / old.summary.peak)
        for old, new, label in pairs
        if is_baseline(old)
        and is_baseline(new)
        and not_comparable(old) is None
        and not_comparable(new) is None
    ]
    if len(ratios) < MIN_DRIFT_BASELINES:
        return None
    return MachineDrift(statistics.median(r for _, r in ratios), tuple(ratios), apply)

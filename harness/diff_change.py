"""One figure of a case in two runs (`Change`): the ratio B / A, its bootstrap interval,
Welch's p on the rounds' logs and that p adjusted for the diff's family of cases; and
whether it is significant by the diff's rule (harness.diff)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.stats import Interval, bootstrap_ratio_interval, welch_log_p

ALPHA = 0.05


@dataclass(frozen=True)
class Change:
    """A figure in run A and run B: the ratio B/A, its interval, the test's p and that p
    adjusted for the diff's family of cases (None until `diff_runs` adjusts it)."""

    old: float | None
    new: float | None
    ratio: float | None
    interval: Interval | None
    p: float | None
    rounds: tuple[int, int]  # usable rounds with the figure in A and in B
    p_adjusted: float | None = None

    @property
    def measured(self) -> bool:
        """Both sides had rounds enough for an interval and a test."""
        return self.interval is not None and self.p is not None

    @property
    def p_verdict(self) -> float | None:
        """The p the verdict reads: adjusted for the diff's cases when it was, else raw."""
        return self.p_adjusted if self.p_adjusted is not None else self.p

    @property
    def significant(self) -> bool:
        """The adjusted p (the raw p before adjustment) < ALPHA and the interval
        excludes 1.0 (the diff's rule)."""
        p = self.p_verdict
        return (
            self.interval is not None
            and p is not None
            and p < ALPHA
            and self.interval.excludes(1.0)
        )

    def to_dict(self) -> dict[str, Any]:
        interval = self.interval.rounded(4) if self.interval else None
        return {
            "a": self.old,
            "b": self.new,
            "ratio": round(self.ratio, 4) if self.ratio is not None else None,
            "ci": list(interval.as_pair()) if interval else None,
            "p": round(self.p, 4) if self.p is not None else None,
            "p_adjusted": round(self.p_adjusted, 4) if self.p_adjusted is not None else None,
            "rounds": list(self.rounds),
        }


def measure_change(
    old: float | None, new: float | None, old_rounds: Sequence[float], new_rounds: Sequence[float]
) -> Change:
    """The change from `old` to `new`: with two rounds or more on each side, the ratio of
    the rounds' means, its bootstrap interval and Welch's p on their logs; otherwise the
    ratio of the two values alone."""
    rounds = (len(old_rounds), len(new_rounds))
    interval = bootstrap_ratio_interval(new_rounds, old_rounds)
    if interval is not None:
        p = welch_log_p(old_rounds, new_rounds)
        return Change(old, new, interval.value, interval, p, rounds)
    ratio = new / old if old and new is not None else None
    return Change(old, new, ratio, None, None, rounds)


def lower_or_higher(change: Change) -> str:
    """A figure where lower is better, in words: `no rounds`, `no significant change`,
    `lower` or `higher` (a change without rounds is judged on nothing: `no rounds`)."""
    if not change.measured:
        return "no rounds"
    if not change.significant:
        return "no significant change"
    return "lower" if (change.ratio or 0) < 1 else "higher"

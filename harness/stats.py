"""Intervals and tests for figures measured in rounds (pure: no I/O, no clock).

The unit of evidence is a **round**: one server start, a warm-up and one fixed-load step,
with every framework's round r run back to back (A B C … A B C …). Per-second samples
inside a step are autocorrelated (a GC pause or a neighbour's burst spans several), so
they are not treated as independent; rounds are, to a fair approximation: separate
processes, minutes apart, their order rotated.

- A figure's interval is Student's t interval on the mean of its rounds (95 %). With few
  rounds the t quantile widens it honestly (n = 5: ± 2.78 standard errors).
- A ratio of two frameworks (or to nginx) is taken **per round** — the two rounds ran
  seconds apart, so drift cancels — and its interval is the t interval of the mean log
  ratio, exponentiated (ratios are multiplicative: 2× and 0.5× are equally far from 1).
- Two runs of one case are compared by Welch's t test on the logs of their rounds (ratios
  are multiplicative, as above; unequal spreads allowed) and the ratio of their means with
  a percentile-bootstrap interval (rounds resampled within each run, seeded, so the same
  inputs give the same interval). A diff tests every case at once, so its p values are
  adjusted for their number by Holm's step-down method (`holm_adjusted`): two runs of
  one commit with 13 cases tested at 0.05 each would show a false change in about half
  of all diffs (1 − 0.95¹³ = 0.49). The rank test (`mann_whitney_p`) cannot be adjusted
  on a handful of rounds: its smallest p with 4 a side, 0.029, times 13 cases is above
  any threshold.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261201


@dataclass(frozen=True)
class Interval:
    """A value and its confidence interval [low, high]."""

    value: float
    low: float
    high: float

    def excludes(self, x: float) -> bool:
        return x < self.low or x > self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def rounded(self, digits: int) -> Interval:
        return Interval(
            round(self.value, digits), round(self.low, digits), round(self.high, digits)
        )

    def as_pair(self) -> tuple[float, float]:
        return (self.low, self.high)


def _scipy_stats() -> ModuleType:
    """scipy.stats, imported on first use: it costs about a second of CPU, which every
    command that imports this module (the CLI's argument checks among them) would pay."""
    from scipy import stats

    return stats


def _t_quantile(samples: int, confidence: float) -> float:
    return float(_scipy_stats().t.ppf(0.5 + confidence / 2, samples - 1))


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Student's t interval on the mean of `values`; None with fewer than two."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = _t_quantile(len(values), confidence) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half)


def paired_ratio_interval(
    numerators: Sequence[float], denominators: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """The geometric-mean ratio of paired rounds and its interval (t on the log ratios);
    None with fewer than two usable pairs (a zero or missing value is not usable)."""
    logs = [
        math.log(a / b)
        for a, b in zip(numerators, denominators, strict=True)
        if a is not None and b is not None and a > 0 and b > 0
    ]
    interval = mean_interval(logs, confidence)
    if interval is None:
        return None
    return Interval(math.exp(interval.value), math.exp(interval.low), math.exp(interval.high))


def mann_whitney_p(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided p of the Mann–Whitney U test (exact for small samples); None if either
    side has fewer than two values."""
    if len(first) < 2 or len(second) < 2:
        return None
    if len(set(first) | set(second)) == 1:
        return 1.0  # identical values: no evidence of a difference
    return float(_scipy_stats().mannwhitneyu(first, second, alternative="two-sided").pvalue)


def welch_log_p(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided p of Welch's t test on the logs of `first` and `second` (on the values
    themselves when any is not positive); None if either side has fewer than two values.
    Two sides without spread are 1.0 when equal, else 0.0."""
    if len(first) < 2 or len(second) < 2:
        return None
    positive = all(v > 0 for v in (*first, *second))
    a = [math.log(v) if positive else v for v in first]
    b = [math.log(v) if positive else v for v in second]
    if statistics.pvariance(a) == 0 and statistics.pvariance(b) == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    return float(_scipy_stats().ttest_ind(a, b, equal_var=False).pvalue)


def holm_adjusted(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p values (None: not tested, left out
    of the family and kept None): the i-th smallest of m becomes the running maximum of
    (m − i) × p, at most 1. Controls the chance of any false finding in the family at
    the threshold, whatever the tests' dependence."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted


def bootstrap_ratio_interval(
    new: Sequence[float], old: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """mean(new) / mean(old) and a percentile-bootstrap interval, each run's rounds
    resampled on their own (unpaired: two runs' rounds did not run side by side)."""
    if len(new) < 2 or len(old) < 2 or statistics.fmean(old) <= 0:
        return None
    generator = random.Random(BOOTSTRAP_SEED)
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        old_mean = statistics.fmean(generator.choices(old, k=len(old)))
        new_mean = statistics.fmean(generator.choices(new, k=len(new)))
        if old_mean > 0:
            ratios.append(new_mean / old_mean)
    ratios.sort()
    tail = (1 - confidence) / 2
    low = ratios[int(tail * (len(ratios) - 1))]
    high = ratios[int((1 - tail) * (len(ratios) - 1))]
    return Interval(statistics.fmean(new) / statistics.fmean(old), low, high)


def log_ratio_change_interval(
    new: Sequence[float], old: Sequence[float], confidence: float = CONFIDENCE
) -> Interval | None:
    """How far the geometric mean of `new` moved from that of `old`, as a ratio, with
    Welch's t interval on the difference of their logs' means (exponentiated): for two
    runs' per-round ratios (each the log-t figure of `paired_ratio_interval`), the change
    of the ratio and its interval. None when either side has fewer than two positive values."""
    a = [math.log(v) for v in new if v > 0]
    b = [math.log(v) for v in old if v > 0]
    if len(a) < 2 or len(b) < 2:
        return None
    difference = statistics.fmean(a) - statistics.fmean(b)
    share_a, share_b = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    spread = share_a + share_b
    if spread == 0:
        return Interval(math.exp(difference), math.exp(difference), math.exp(difference))
    # Welch–Satterthwaite degrees of freedom
    freedom = spread**2 / (share_a**2 / (len(a) - 1) + share_b**2 / (len(b) - 1))
    half = float(_scipy_stats().t.ppf(0.5 + confidence / 2, freedom)) * math.sqrt(spread)
    return Interval(math.exp(difference), math.exp(difference - half), math.exp(difference + half))

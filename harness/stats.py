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
- Two runs of one case are compared by the Mann–Whitney U test on their rounds (no
  normality assumed; with 5 rounds each the smallest two-sided p is 0.008) and the ratio of
  their means with a percentile-bootstrap interval (rounds resampled within each run,
  seeded, so the same inputs give the same interval).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

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


def _t_quantile(samples: int, confidence: float) -> float:
    return float(scipy_stats.t.ppf(0.5 + confidence / 2, samples - 1))


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
    return float(scipy_stats.mannwhitneyu(first, second, alternative="two-sided").pvalue)


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

"""Reading the latency histograms results keep (base64 HdrHistograms of µs, see
docs/results.md) for the percentile spectrum."""

from __future__ import annotations

import numpy as np
from hdrh.histogram import HdrHistogram

# x = 1/(1-p): 2 is p50, 100 000 is p99.999
SPECTRUM_LOW_X = 2.0
SPECTRUM_HIGH_X = 100_000.0
SPECTRUM_POINTS = 120


def decode(encoded: str) -> HdrHistogram:
    """A histogram from its base64 text; ValueError when it is not one."""
    histogram = HdrHistogram.decode(encoded.encode("ascii"))
    if histogram is None:
        raise ValueError(f"not an encoded HdrHistogram: {encoded[:20]!r}…")
    return histogram


def spectrum(encoded: str) -> tuple[list[float], list[float]]:
    """(1/(1−p), latency ms) from p50 up to p99.999 — or up to the histogram's own
    resolution: beyond 1/(1−p) = its count every percentile is its maximum, so the line
    ends there rather than drawing a flat tail no request measured."""
    histogram = decode(encoded)
    count = histogram.get_total_count()
    if count == 0:
        return [], []
    top = min(SPECTRUM_HIGH_X, max(SPECTRUM_LOW_X, float(count)))
    xs = [float(x) for x in np.geomspace(SPECTRUM_LOW_X, top, SPECTRUM_POINTS)]
    ys = [histogram.get_value_at_percentile(100.0 * (1.0 - 1.0 / x)) / 1000.0 for x in xs]
    return xs, ys

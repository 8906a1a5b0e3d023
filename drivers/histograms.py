"""Latency histograms: HdrHistograms of microseconds, kept whole in results as base64.

Every driver that can see each request's latency records it here (oha from its per-request
rows, wrk from its done() buckets, mcload from its own recorder), so steps, processes,
repeats and — later — load hosts merge exactly, by adding counts, never by averaging
percentiles. The range is 1 µs to 60 s at 3 significant digits (any value is kept to
within 0.1 %); a value outside it is clamped to the nearest end. The encoding is
HdrHistogram's own compressed V2 format in base64 (`HISTF…`), readable by every
HdrHistogram library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hdrh.histogram import HdrHistogram

from model.results import LATENCY_KEYS, PERCENTILES

LOWEST_US = 1
HIGHEST_US = 60_000_000
SIGNIFICANT_DIGITS = 3


def new_histogram() -> HdrHistogram:
    """An empty latency histogram (µs, 1 µs..60 s, 3 significant digits)."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_us(histogram: HdrHistogram, value_us: float, count: int = 1) -> None:
    """Record `count` latencies of `value_us` (clamped into the histogram's range)."""
    clamped = min(HIGHEST_US, max(LOWEST_US, round(value_us)))
    histogram.record_value(clamped, count)


def histogram_of(values_us: Iterable[float]) -> HdrHistogram:
    """A histogram holding every value of `values_us`."""
    histogram = new_histogram()
    for value in values_us:
        record_us(histogram, value)
    return histogram


def histogram_of_counts(counts: Mapping[int, int]) -> HdrHistogram:
    """A histogram from value (µs) → count: one record per distinct value, so a step's
    100,000 requests cost a few thousand records."""
    histogram = new_histogram()
    for value_us, count in counts.items():
        record_us(histogram, value_us, count)
    return histogram


def encode(histogram: HdrHistogram) -> str:
    """The histogram as base64 text (HdrHistogram's compressed V2 encoding)."""
    return histogram.encode().decode("ascii")


def decode(encoded: str) -> HdrHistogram:
    """A histogram from `encode`'s text; ValueError when it is not one."""
    try:
        histogram = HdrHistogram.decode(encoded.encode("ascii"))
    except Exception as error:  # hdrh raises several kinds on a bad payload
        raise ValueError(f"not an encoded HdrHistogram: {encoded[:20]!r}…") from error
    if histogram is None:
        raise ValueError(f"not an encoded HdrHistogram: {encoded[:20]!r}…")
    return histogram


def merge(histograms: Sequence[HdrHistogram]) -> HdrHistogram:
    """One histogram holding every value of `histograms` (counts added: exact)."""
    merged = new_histogram()
    for histogram in histograms:
        merged.add(histogram)
    return merged


def merge_encoded(encoded: Sequence[str]) -> str:
    """`merge` on encoded histograms, encoded."""
    return encode(merge([decode(text) for text in encoded]))


def latency_ms(histogram: HdrHistogram) -> dict[str, float | None]:
    """avg, p50, p90, p99, p99.9, p99.99 and max in milliseconds (None when empty)."""
    if histogram.get_total_count() == 0:
        return dict.fromkeys(LATENCY_KEYS)
    figures: dict[str, float | None] = {"avg": histogram.get_mean_value() / 1000.0}
    for name, percentile in PERCENTILES.items():
        figures[name] = histogram.get_value_at_percentile(percentile) / 1000.0
    figures["max"] = histogram.get_max_value() / 1000.0
    return {key: figures[key] for key in LATENCY_KEYS}

"""A driver process's measurement of one step (`DriverResult`), the error kinds every driver
shares, and how side-by-side processes merge into one result.

Error kinds are common to every driver so that charts and tables compare like with like:

- connect:   connection refused or failed to open
- timeout:   no (complete) reply within the timeout
- reset:     connection reset by the server
- read, write: socket errors while reading or sending
- status:    a reply that was not 2xx
- length:    a reply whose length differed from the first (ab), when lengths must agree
- wrong:     a 2xx reply whose body was not the expected one (checked scenarios)
- other:     anything else the tool reports
- driver_*:  the load generator's own limits (httperf's fd-unavail, addrunavail, ftab-full):
             not the server's fault, kept out of `total` and flagged `driver_capped`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from drivers import histograms as hdr
from model.results import LATENCY_KEYS
from model.step_figures import StepFigures, numeric_sum

SERVER_ERROR_KINDS = (
    "connect", "timeout", "reset", "read", "write", "status", "length", "wrong", "other",
)  # fmt: skip


class DriverOutputError(ValueError):
    """A driver's output holds no result (it aborted, or is not the tool's output)."""


@dataclass(frozen=True)
class DriverResult:
    """One driver process's measurement of one step."""

    replies: int  # good (2xx) replies
    duration_s: float
    errors: dict[str, int]  # by kind; `driver_*` kinds are the generator's own limits
    latency_ms: dict[str, float | None]
    achieved: float | None = None  # good replies/s as the tool reports it; else replies/duration
    driver_cpu_pct: float | None = None
    # what the tool reports beyond the common columns (its duration, bytes, connections...)
    figures: StepFigures = field(default_factory=StepFigures)
    # open-loop drivers: the same requests timed from their actual send (latency_ms counts
    # from the intended send)
    latency_uncorrected_ms: dict[str, float | None] | None = None
    # name (model.results.HISTOGRAM_NAMES) → base64 HdrHistogram of µs (drivers.histograms)
    histograms: dict[str, str] = field(default_factory=dict)
    # the protocol the tool reports it spoke (servers.contract.PROTOCOLS); None: it does not
    # say (a step is then judged by what its server was started with)
    negotiated: str | None = None

    @property
    def errors_total(self) -> int:
        """Errors the server is answerable for (the driver's own limits excluded)."""
        return sum(n for kind, n in self.errors.items() if not kind.startswith("driver_"))

    @property
    def driver_errors(self) -> int:
        return sum(n for kind, n in self.errors.items() if kind.startswith("driver_"))

    @property
    def rate(self) -> float:
        if self.achieved is not None:
            return self.achieved
        return self.replies / self.duration_s if self.duration_s > 0 else 0.0


def no_latency() -> dict[str, float | None]:
    return dict.fromkeys(LATENCY_KEYS)


def merge_results(results: Sequence[DriverResult]) -> DriverResult:
    """Several processes that ran side by side (httperf --client i/n) as one result.

    Histograms every process kept are added (exact), and the latency figures are read
    from the sum; without them only the average (weighted) and the maximum can be merged.
    """
    if len(results) == 1:
        return results[0]
    replies = sum(r.replies for r in results)
    errors: dict[str, int] = {}
    for result in results:
        for kind, count in result.errors.items():
            errors[kind] = errors.get(kind, 0) + count
    latency = no_latency()
    averages = [
        (r.latency_ms["avg"], r.replies) for r in results if r.latency_ms["avg"] is not None
    ]
    if averages and sum(w for _, w in averages):
        latency["avg"] = sum(v * w for v, w in averages) / sum(w for _, w in averages)
    maxima = [r.latency_ms["max"] for r in results if r.latency_ms["max"] is not None]
    latency["max"] = max(maxima) if maxima else None
    cpus = [r.driver_cpu_pct for r in results if r.driver_cpu_pct is not None]
    # the numeric figures add up (bytes, requests, connections); the others do not merge
    summed = numeric_sum([r.figures for r in results])
    figures = StepFigures(**{**summed, "processes": len(results)})
    histograms: dict[str, str] = {}
    uncorrected = None
    for name in {name for r in results for name in r.histograms}:
        if all(name in r.histograms for r in results):
            merged = hdr.merge([hdr.decode(r.histograms[name]) for r in results])
            histograms[name] = hdr.encode(merged)
            if name == "latency":
                latency = hdr.latency_ms(merged)
            elif name == "latency_uncorrected":
                uncorrected = hdr.latency_ms(merged)
    spoken = {r.negotiated for r in results if r.negotiated is not None}
    return DriverResult(
        replies=replies,
        duration_s=max(r.duration_s for r in results),
        errors=errors,
        latency_ms=latency,
        achieved=sum(r.rate for r in results),
        driver_cpu_pct=sum(cpus) if cpus else None,
        figures=figures,
        latency_uncorrected_ms=uncorrected,
        histograms=histograms,
        # what every process that said agreed on (two different ones: none is claimed)
        negotiated=spoken.pop() if len(spoken) == 1 else None,
    )

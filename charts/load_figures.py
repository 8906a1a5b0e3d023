"""Figures against the offered load, one line per framework: throughput, errors, latency,
server CPU and memory; for open-loop rate ramps also the latency against the offered rate
with each framework's knee, and the percentile spectrum at a rate all of them held.

Latency read at a concurrency (closed loop: wrk, ab, siege) says so in its title.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

from charts.drawing import (
    FIGSIZE,
    THOUSANDS,
    UNIT_LABELS,
    Series,
    legend,
    load_axis,
    log_minor_label,
    new_axes,
    plot_metric,
    ramp_unit,
    rss_mb,
    titled,
)
from charts.histograms import spectrum

# Peaks further apart than this get a log y axis: nginx at 166k req/s would otherwise
# flatten five Python frameworks at 5–26k into the bottom tenth of a linear one.
LOG_SPREAD = 5.0


def _spread(values: Sequence[float]) -> float:
    """Largest over smallest of the positive values (1.0 when there are fewer than two)."""
    positive = [v for v in values if v > 0]
    return max(positive) / min(positive) if len(positive) > 1 else 1.0


def throughput_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Achieved against offered load, one line per framework; a log y axis when the
    frameworks' best steps are more than LOG_SPREAD apart (a baseline 10× the rest)."""
    unit = ramp_unit(series)
    figure, axes = new_axes(
        titled("Throughput", context), UNIT_LABELS[unit], "achieved (replies/s)"
    )
    flags: set[str] = set()
    for one in series:
        flags |= plot_metric(axes, one, lambda s: s.achieved)
    best = [max(s.achieved for s in one.steps) for one in series if one.steps]
    log = _spread(best) > LOG_SPREAD
    if unit == "req/s":
        offered = [s.offered for one in series for s in one.steps]
        if offered:
            top = max(offered)
            # a log axis has no 0: the ideal line starts at the lightest load offered
            start = min(o for o in offered if o > 0) if log else 0
            axes.plot(
                [start, top],
                [start, top],
                color="grey",
                linestyle=":",
                label="ideal (y = x)",
                gid="ideal",
            )
    if log:
        axes.set_yscale("log")
        lowest = min(s.achieved for one in series for s in one.steps if s.achieved > 0)
        axes.set_ylim(bottom=lowest / 1.5)
        axes.set_ylabel("achieved (replies/s, log scale)")
        axes.yaxis.set_minor_formatter(FuncFormatter(log_minor_label))
    else:
        axes.set_ylim(bottom=0)
    axes.yaxis.set_major_formatter(THOUSANDS)
    legend(axes, flags)
    return figure


def errors_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Errors per step (left) and the error rate (right) against the load; a note on both
    panels when no step had any."""
    unit = ramp_unit(series)
    figure, (count_axes, rate_axes) = plt.subplots(1, 2, figsize=FIGSIZE, layout="constrained")
    figure.suptitle(titled("Errors", context))
    flags: set[str] = set()
    for axes, ylabel in ((count_axes, "errors per step"), (rate_axes, "error rate (%)")):
        axes.set_xlabel(UNIT_LABELS[unit])
        axes.set_ylabel(ylabel)
        axes.grid(True, alpha=0.3)
        load_axis(axes, nbins=8)
    for one in series:
        flags |= plot_metric(count_axes, one, lambda s: s.errors["total"])
        plot_metric(rate_axes, one, lambda s: s.error_rate * 100.0)
    if not any(s.errors["total"] for one in series for s in one.steps):
        for axes in (count_axes, rate_axes):
            axes.set_ylim(0, 1)
            axes.text(
                0.5,
                0.5,
                "no errors in any step",
                transform=axes.transAxes,
                ha="center",
                va="center",
                color="grey",
                gid="no-errors",
            )
    count_axes.set_ylim(bottom=0)
    rate_axes.set_ylim(bottom=0)
    count_axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    legend(rate_axes, flags)
    return figure


def latency_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Average (left) and p99 (right) latency, a panel each sharing the y axis, so nine
    frameworks draw nine lines a panel rather than eighteen in one; log when they span
    decades."""
    unit = ramp_unit(series)
    what = (
        "Latency" if unit == "req/s" else "Latency (closed loop: read at a concurrency, not a load)"
    )
    figure, (avg_axes, p99_axes) = plt.subplots(
        1, 2, figsize=FIGSIZE, layout="constrained", sharey=True
    )
    figure.suptitle(titled(what, context))
    for axes, name in ((avg_axes, "average"), (p99_axes, "p99")):
        axes.set_title(name)
        axes.set_xlabel(UNIT_LABELS[unit])
        axes.grid(True, alpha=0.3)
        load_axis(axes, nbins=6)
    avg_axes.set_ylabel("latency (ms)")
    flags: set[str] = set()
    values: list[float] = []
    for one in series:
        flags |= plot_metric(avg_axes, one, lambda s: s.latency_ms.get("avg"), label_suffix=" avg")
        plot_metric(p99_axes, one, lambda s: s.latency_ms.get("p99"), label_suffix=" p99")
        for step in one.steps:
            values += [v for v in (step.latency_ms.get("avg"), step.latency_ms.get("p99")) if v]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        avg_axes.set_yscale("log")  # it spans decades (the y axis is shared)
    # one legend, by framework: a line's panel already says avg or p99
    handles, labels = avg_axes.get_legend_handles_labels()
    more, more_labels = p99_axes.get_legend_handles_labels()
    seen = set(labels)
    for handle, label in zip(more, more_labels, strict=True):
        if label.removesuffix(" p99") + " avg" not in seen:
            handles.append(handle)
            labels.append(label)
    labels = [label.removesuffix(" avg").removesuffix(" p99") for label in labels]
    legend(p99_axes, flags, (handles, labels))
    return figure


def latency_rate_figure(series: Sequence[Series], context: str = "") -> Figure:
    """p99 (solid) and p50 (dotted) against the offered rate, each framework's knee — where
    p99 leaves its floor (harness.run.analysis.find_knee) — marked with a star."""
    figure, axes = new_axes(
        titled("Latency against offered load (open loop)", context),
        UNIT_LABELS["req/s"],
        "latency from the intended send (ms)",
    )
    flags: set[str] = set()
    values: list[float] = []
    for one in series:
        flags |= plot_metric(axes, one, lambda s: s.latency_ms.get("p99"), label_suffix=" p99")
        plot_metric(
            axes, one, lambda s: s.latency_ms.get("p50"), label_suffix=" p50", linestyle=":"
        )
        values += [
            v for s in one.steps for v in (s.latency_ms.get("p50"), s.latency_ms.get("p99")) if v
        ]
        knee = one.case.summary.knee
        if knee and knee.get("p99_ms") is not None:
            axes.plot(
                [knee["offered"]],
                [knee["p99_ms"]],
                marker="*",
                markersize=16,
                linestyle="none",
                color=one.colour,
                markeredgecolor="black",
                label=f"{one.label} knee: {knee['offered']:,.0f} req/s",
                gid="knee:" + one.label,
            )
    if values and min(values) > 0 and max(values) / min(values) > 10:
        axes.set_yscale("log")
    legend(axes, flags)
    return figure


def common_held_rate(series: Sequence[Series]) -> float | None:
    """The highest offered rate at which every series has a held step with a histogram
    (no errors, ≥ 95 % achieved): where their latencies compare at equal load."""
    rates: set[float] | None = None
    for one in series:
        held = {
            s.offered
            for s in one.steps
            if "latency" in s.histograms
            and not s.errors["total"]
            and s.achieved >= 0.95 * s.offered
        }
        rates = held if rates is None else rates & held
    return max(rates) if rates else None


SPECTRUM_TICKS = {
    2: "50%",
    10: "90%",
    100: "99%",
    1_000: "99.9%",
    10_000: "99.99%",
    100_000: "99.999%",
}


def spectrum_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """The percentile spectrum (HdrHistogram's plot): latency against 1/(1−p) on a log
    axis, p50 … p99.999, one line per framework at the same offered rate — the highest
    every one of them held; from the intended send (solid) and the actual send (dashed).
    None when no rate has a histogram from every series."""
    with_histograms = [one for one in series if any(s.histograms for s in one.steps)]
    rate = common_held_rate(with_histograms)
    if rate is None:
        return None
    figure, axes = new_axes(
        titled(f"Percentile spectrum at {rate:,.0f} req/s", context),
        "percentile",
        "latency (ms)",
    )
    values: list[float] = []
    for one in with_histograms:
        step = next(s for s in one.steps if s.offered == rate and "latency" in s.histograms)
        for name, style, suffix in (
            ("latency", "-", ""),
            ("latency_uncorrected", "--", " (from actual send)"),
        ):
            if name not in step.histograms:
                continue
            xs, ys = spectrum(step.histograms[name])
            axes.plot(
                xs,
                ys,
                color=one.colour,
                linestyle=style,
                linewidth=2.0 if style == "-" else 1.0,
                label=one.label + suffix,
                gid=f"spectrum:{one.label}{suffix}",
            )
            values += [y for y in ys if y > 0]
    axes.set_xscale("log")
    axes.set_xlim(2, 100_000)
    axes.set_xticks(list(SPECTRUM_TICKS), list(SPECTRUM_TICKS.values()))
    axes.xaxis.set_minor_locator(NullLocator())
    if values and max(values) / min(values) > 10:
        axes.set_yscale("log")
    legend(axes, set())
    return figure


def cpu_figure(series: Sequence[Series], context: str = "") -> Figure:
    """The server's process-tree CPU (% of one core) against the load."""
    unit = ramp_unit(series)
    figure, axes = new_axes(
        titled("Server CPU", context), UNIT_LABELS[unit], "server CPU (% of one core)"
    )
    flags: set[str] = set()
    for one in series:
        flags |= plot_metric(axes, one, lambda s: s.server_cpu_pct)
    axes.set_ylim(bottom=0)
    legend(axes, flags)
    return figure


def memory_figure(series: Sequence[Series], context: str = "") -> Figure:
    """The server's largest RSS in each step (MB) against the load."""
    unit = ramp_unit(series)
    figure, axes = new_axes(titled("Server memory", context), UNIT_LABELS[unit], "server RSS (MB)")
    flags: set[str] = set()
    for one in series:
        flags |= plot_metric(axes, one, rss_mb)
    axes.set_ylim(bottom=0)
    legend(axes, flags)
    return figure

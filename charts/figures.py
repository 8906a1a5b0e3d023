"""Figures from result files: one line per framework against the offered load.

Every builder takes `Series` (one case of one run, already labelled) and returns a
matplotlib Figure, so tests can ask what was drawn. Steps flagged `driver_bound` or
`noisy` are drawn hollow, and the legend says so. A framework keeps its colour in every
figure and every run (charts.style). Latency read at a concurrency (closed loop: wrk, ab,
siege) says so in its title; open-loop rate ramps get the latency against the offered
rate with each framework's knee, and the percentile spectrum at a rate all of them held.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator, StrMethodFormatter

from charts.histograms import spectrum
from charts.style import HOLLOW_FLAGS, Look, colour_for, linestyle_for
from model.results import Case, Step

FIGSIZE = (10.0, 5.6)
UNIT_LABELS = {
    "req/s": "offered load (requests/s)",
    "concurrency": "concurrent connections (closed loop)",
    "conns": "open WebSocket connections",
}


@dataclass(frozen=True)
class Series:
    """One case to draw: its label, colour key and the run it came from."""

    label: str
    framework: str
    run_index: int
    case: Case
    look: Look | None = None  # its colour and marker in this run (charts.style.palette)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.case.steps

    @property
    def colour(self) -> str:
        """The server's colour: its look's, or its fixed one when drawn alone."""
        return self.look.colour if self.look is not None else colour_for(self.framework)

    @property
    def marker(self) -> str:
        return self.look.marker if self.look is not None else "o"


def _new(
    title: str, xlabel: str, ylabel: str, categorical: bool = False
) -> tuple[Figure, plt.Axes]:
    figure, axes = plt.subplots(figsize=FIGSIZE, layout="constrained")
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3, axis="y" if categorical else "both")
    if not categorical:
        # 8, not 12: a load written with its separators ("184,000") is 7-9 characters,
        # and 13 of them ran into each other under a 5.5-inch axis
        _load_axis(axes, nbins=8)
    return figure, axes


THOUSANDS = StrMethodFormatter("{x:,.0f}")


def _load_tick(value: float, _position: int) -> str:
    """An offered load on the x axis with thousands separators (240,000, not 240000), its
    fraction kept where a tick has one (2.5)."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


LOAD_TICKS = FuncFormatter(_load_tick)


def _load_axis(axes: plt.Axes, nbins: int) -> None:
    """An offered-load x axis: at most `nbins` ticks, each with its separators."""
    axes.xaxis.set_major_locator(MaxNLocator(nbins=nbins))
    axes.xaxis.set_major_formatter(LOAD_TICKS)


def _log_minor_label(value: float, _position: int) -> str:
    """A log axis's minor ticks labelled at 2 and 5 of each decade (20,000, 50,000), in the
    major ticks' style rather than matplotlib's 2×10⁴."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value))
    return f"{value:,.0f}" if round(mantissa) in (2, 5) else ""


def _legend(
    axes: plt.Axes,
    hollow_used: set[str],
    entries: tuple[list[Any], list[str]] | None = None,
) -> None:
    """The legend beside `axes`: its own lines (or `entries`), and what hollow marks mean."""
    handles, labels = entries or axes.get_legend_handles_labels()
    if hollow_used:
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                linestyle="none",
                markerfacecolor="none",
                markeredgecolor="black",
            )
        )
        labels.append("hollow: " + ", ".join(sorted(hollow_used)))
    if handles:
        # Outside the plot: a legend never hides data.
        axes.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)


def _plot_metric(
    axes: plt.Axes,
    series: Series,
    value: Callable[[Step], float | None],
    *,
    x_of: Callable[[Step], float | None] = lambda s: s.offered,
    label_suffix: str = "",
    linestyle: str | None = None,
) -> set[str]:
    """One line with filled markers, flagged steps hollow; returns the flags seen."""
    points = [(x_of(s), value(s), s) for s in series.steps]
    points = [(x, y, s) for x, y, s in points if x is not None and y is not None]
    if not points:
        return set()
    colour = series.colour
    style = linestyle or linestyle_for(series.run_index)
    xs = [x for x, _, _ in points]
    ys = [y for _, y, _ in points]
    axes.plot(
        xs,
        ys,
        color=colour,
        linestyle=style,
        marker=series.marker,
        markersize=5,
        label=series.label + label_suffix,
        gid=series.label + label_suffix,
    )
    flagged = [(x, y) for x, y, s in points if HOLLOW_FLAGS & set(s.flags)]
    if flagged:
        axes.plot(
            [x for x, _ in flagged],
            [y for _, y in flagged],
            linestyle="none",
            marker=series.marker,
            markersize=9,
            markerfacecolor="white",
            markeredgecolor=colour,
            markeredgewidth=1.5,
            gid="flagged:" + series.label,
        )
    return {flag for _, _, s in points for flag in s.flags if flag in HOLLOW_FLAGS}


def _unit(series: Sequence[Series]) -> str:
    return series[0].steps[0].unit if series and series[0].steps else "req/s"


def _title(what: str, context: str) -> str:
    return f"{what} — {context}" if context else what


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
    unit = _unit(series)
    figure, axes = _new(_title("Throughput", context), UNIT_LABELS[unit], "achieved (replies/s)")
    flags: set[str] = set()
    for one in series:
        flags |= _plot_metric(axes, one, lambda s: s.achieved)
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
        axes.yaxis.set_minor_formatter(FuncFormatter(_log_minor_label))
    else:
        axes.set_ylim(bottom=0)
    axes.yaxis.set_major_formatter(THOUSANDS)
    _legend(axes, flags)
    return figure


def errors_figure(series: Sequence[Series], context: str = "") -> Figure:
    unit = _unit(series)
    figure, (count_axes, rate_axes) = plt.subplots(1, 2, figsize=FIGSIZE, layout="constrained")
    figure.suptitle(_title("Errors", context))
    flags: set[str] = set()
    for axes, ylabel in ((count_axes, "errors per step"), (rate_axes, "error rate (%)")):
        axes.set_xlabel(UNIT_LABELS[unit])
        axes.set_ylabel(ylabel)
        axes.grid(True, alpha=0.3)
        _load_axis(axes, nbins=8)
    for one in series:
        flags |= _plot_metric(count_axes, one, lambda s: s.errors["total"])
        _plot_metric(rate_axes, one, lambda s: s.error_rate * 100.0)
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
    _legend(rate_axes, flags)
    return figure


def latency_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Average (left) and p99 (right) latency, a panel each sharing the y axis, so nine
    frameworks draw nine lines a panel rather than eighteen in one; log when they span
    decades."""
    unit = _unit(series)
    what = (
        "Latency" if unit == "req/s" else "Latency (closed loop: read at a concurrency, not a load)"
    )
    figure, (avg_axes, p99_axes) = plt.subplots(
        1, 2, figsize=FIGSIZE, layout="constrained", sharey=True
    )
    figure.suptitle(_title(what, context))
    for axes, name in ((avg_axes, "average"), (p99_axes, "p99")):
        axes.set_title(name)
        axes.set_xlabel(UNIT_LABELS[unit])
        axes.grid(True, alpha=0.3)
        _load_axis(axes, nbins=6)
    avg_axes.set_ylabel("latency (ms)")
    flags: set[str] = set()
    values: list[float] = []
    for one in series:
        flags |= _plot_metric(avg_axes, one, lambda s: s.latency_ms.get("avg"), label_suffix=" avg")
        _plot_metric(p99_axes, one, lambda s: s.latency_ms.get("p99"), label_suffix=" p99")
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
    _legend(p99_axes, flags, (handles, labels))
    return figure


def latency_rate_figure(series: Sequence[Series], context: str = "") -> Figure:
    """p99 (solid) and p50 (dotted) against the offered rate, each framework's knee — where
    p99 leaves its floor (harness.run.analysis.find_knee) — marked with a star."""
    figure, axes = _new(
        _title("Latency against offered load (open loop)", context),
        UNIT_LABELS["req/s"],
        "latency from the intended send (ms)",
    )
    flags: set[str] = set()
    values: list[float] = []
    for one in series:
        flags |= _plot_metric(axes, one, lambda s: s.latency_ms.get("p99"), label_suffix=" p99")
        _plot_metric(
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
    _legend(axes, flags)
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
    figure, axes = _new(
        _title(f"Percentile spectrum at {rate:,.0f} req/s", context),
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
    _legend(axes, set())
    return figure


def cpu_figure(series: Sequence[Series], context: str = "") -> Figure:
    unit = _unit(series)
    figure, axes = _new(
        _title("Server CPU", context), UNIT_LABELS[unit], "server CPU (% of one core)"
    )
    flags: set[str] = set()
    for one in series:
        flags |= _plot_metric(axes, one, lambda s: s.server_cpu_pct)
    axes.set_ylim(bottom=0)
    _legend(axes, flags)
    return figure


def memory_figure(series: Sequence[Series], context: str = "") -> Figure:
    unit = _unit(series)
    figure, axes = _new(_title("Server memory", context), UNIT_LABELS[unit], "server RSS (MB)")
    flags: set[str] = set()
    for one in series:
        flags |= _plot_metric(axes, one, _rss_mb)
    axes.set_ylim(bottom=0)
    _legend(axes, flags)
    return figure


def peak_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Peak sustained throughput per framework (baselines hatched), each bar with its 95 %
    interval as an error bar and its rounds' peaks as dots beside it (kept-out rounds
    hollow) when it was measured in rounds."""
    figure, axes = _new(
        _title("Peak sustained throughput", context),
        "framework",
        "peak (replies/s, error-free)",
        categorical=True,
    )
    labels, peaks, colours, hatches, texts = [], [], [], [], []
    intervals: list[tuple[float, float] | None] = []
    for one in series:
        if one.case.status != "ok" or one.case.summary.peak is None:
            continue
        labels.append(one.label)
        peaks.append(float(one.case.summary.peak))
        colours.append(one.colour)
        hatches.append("//" if one.case.summary.role == "baseline" else "")
        intervals.append(one.case.summary.peak_ci)
        ratio = one.case.summary.ratio_to_nginx
        # the affinity study: the ratio to nginx measured in the same run is the figure that travels
        texts.append(f"{peaks[-1]:,.0f}" + (f"\n{ratio:.2f}×" if ratio is not None else ""))
    bars = axes.bar(labels, peaks, color=colours, hatch=hatches, edgecolor="black", gid="peaks")
    tops = _interval_bars(axes, peaks, intervals, "peak-ci")
    if any(ci is not None for ci in intervals):
        # said on the axis, not in a legend that could cover a bar's label
        axes.set_ylabel("peak (replies/s, error-free; error bars: 95 % interval)")
    shown = [one for one in series if one.case.status == "ok" and one.case.summary.peak is not None]
    dotted = _round_dots(axes, shown, bars)
    if dotted:
        tops = [max([top, *highest]) for top, highest in zip(tops, dotted, strict=True)]
        axes.set_ylabel(axes.get_ylabel().removesuffix(")") + "; dots: each round)")
    if any(one.case.summary.ratio_to_nginx is not None for one in series):
        axes.set_xlabel("framework (under each peak: its ratio to nginx in this run)")
    _label_bars(axes, bars, tops, texts)
    axes.yaxis.set_major_formatter(THOUSANDS)
    return figure


def _interval_bars(
    axes: Axes, values: Sequence[float], intervals: Sequence[tuple[float, float] | None], gid: str
) -> list[float]:
    """Each bar's 95 % interval as an error bar (asymmetric: an interval need not be
    centred on the mean it surrounds; a bar without one gets none rather than a
    zero-length one); each bar's top, the interval's included."""
    measured = [(i, ci) for i, ci in enumerate(intervals) if ci is not None]
    if measured:
        errorbar = axes.errorbar(
            [i for i, _ in measured],
            [values[i] for i, _ in measured],
            yerr=[
                [max(values[i] - ci[0], 0.0) for i, ci in measured],
                [max(ci[1] - values[i], 0.0) for i, ci in measured],
            ],
            fmt="none",
            ecolor="black",
            capsize=4,
        )
        for bar_lines in errorbar.lines[2]:  # the vertical segments (a container has no gid)
            bar_lines.set_gid(gid)
    return [max(ci[1], v) if ci else v for v, ci in zip(values, intervals, strict=True)]


def _label_bars(axes: Axes, bars: Any, tops: Sequence[float], texts: Sequence[str]) -> None:
    """Each bar's text above its top (an interval's included, so no error bar runs through
    it), the ticks slanted past five bars, room above the tallest."""
    for bar, top, text in zip(bars, tops, texts, strict=True):
        axes.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    if len(texts) > 5:
        axes.tick_params(axis="x", labelrotation=30)
    axes.set_ylim(0, (max(tops, default=0) or 1) * 1.18)  # all peaks 0: still an axis


def efficiency_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """The server's CPU per reply at the peak, per server (its cgroup's CPU over the
    replies; baselines hatched), each bar with its 95 % interval over rounds, and above it
    the replies one CPU-second buys (10⁶ / µs). None when no case measured it."""
    shown = [
        one
        for one in series
        if one.case.status == "ok" and one.case.summary.cpu_us_per_req is not None
    ]
    if not shown:
        return None
    figure, axes = _new(
        _title("CPU per reply at the peak (lower is leaner)", context),
        "framework (above each bar: replies per CPU-second)",
        "server CPU per reply (µs; error bars: 95 % interval)",
        categorical=True,
    )
    labels = [one.label for one in shown]
    costs = [float(one.case.summary.cpu_us_per_req or 0.0) for one in shown]
    bars = axes.bar(
        labels,
        costs,
        color=[one.colour for one in shown],
        hatch=["//" if one.case.summary.role == "baseline" else "" for one in shown],
        edgecolor="black",
        gid="cpu-per-reply",
    )
    intervals = [one.case.summary.cpu_us_per_req_ci for one in shown]
    tops = _interval_bars(axes, costs, intervals, "cpu-per-reply-ci")
    _label_bars(axes, bars, tops, [f"{1e6 / c if c > 0 else 0.0:,.0f}/s" for c in costs])
    return figure


def _round_dots(axes: Axes, shown: Sequence[Series], bars: Any) -> list[list[float]] | None:
    """Each bar's rounds as dots beside it (kept-out rounds hollow): the spread an interval
    summarises, seen. Returns each bar's round peaks (empty for a bar without rounds), or
    None when no bar has rounds."""
    if not any(one.case.rounds for one in shown):
        return None
    peaks_by_bar = []
    for one, bar in zip(shown, bars, strict=True):
        excluded = {e["round"] for e in one.case.summary.rounds_excluded}
        rounds = one.case.rounds
        x = bar.get_x() + bar.get_width() + 0.06  # just right of the bar, in the gap
        kept = [s.achieved for s in rounds if s.figures.round not in excluded]
        out = [s.achieved for s in rounds if s.figures.round in excluded]
        if kept:
            axes.scatter([x] * len(kept), kept, s=12, color="black", zorder=3, gid="round-peaks")
        if out:
            axes.scatter(
                [x] * len(out), out, s=14, facecolors="none", edgecolors="black", zorder=3,
                gid="round-peaks-excluded",
            )  # fmt: skip
        peaks_by_bar.append([s.achieved for s in rounds])
    return peaks_by_bar


def protocol_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Each server's peak per protocol: grouped bars, one per protocol, each with its 95 %
    interval when measured in rounds; under each h1-tls bar its TLS tax (the h1-tls peak
    over the same server's h1 peak)."""
    protocols = list(dict.fromkeys(s.case.protocol for s in series))
    frameworks = list(dict.fromkeys(s.framework for s in series))
    figure, axes = _new(
        _title("Peak per protocol", context), "server", "peak (replies/s)", categorical=True
    )
    width = 0.8 / max(1, len(protocols))
    top = 1.0
    for index, protocol in enumerate(protocols):
        positions, values, errors_low, errors_high, taxes = [], [], [], [], []
        for place, framework in enumerate(frameworks):
            cases = [
                s.case
                for s in series
                if s.framework == framework
                and s.case.protocol == protocol
                and s.case.status == "ok"
                and s.case.summary.peak is not None
            ]
            if not cases:
                continue
            best = max(cases, key=lambda c: c.summary.peak or 0.0)
            peak = float(best.summary.peak or 0.0)
            low, high = best.summary.peak_ci or (peak, peak)
            positions.append(place + (index - (len(protocols) - 1) / 2) * width)
            values.append(peak)
            errors_low.append(max(peak - low, 0.0))
            errors_high.append(max(high - peak, 0.0))
            taxes.append(best.summary.tls_tax)
            top = max(top, high, peak)
        bars = axes.bar(
            positions,
            values,
            width=width,
            label=protocol,
            gid=f"protocol:{protocol}",
            edgecolor="black",
            alpha=0.55 + 0.45 * index / max(1, len(protocols) - 1),
        )
        if any(errors_low) or any(errors_high):
            axes.errorbar(
                positions, values, yerr=[errors_low, errors_high], fmt="none", ecolor="black",
                capsize=3,
            )  # fmt: skip
        for bar, value, tax in zip(bars, values, taxes, strict=True):
            text = f"{value:,.0f}" + (f"\n{tax:.2f}×" if tax is not None else "")
            axes.annotate(
                text,
                (bar.get_x() + bar.get_width() / 2, value),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    axes.set_xticks(range(len(frameworks)), frameworks)
    if any(s.case.summary.tls_tax is not None for s in series):
        axes.set_xlabel("server (under each h1-tls peak: its TLS tax, the ratio to its h1 peak)")
    axes.set_ylim(0, top * 1.2)
    axes.yaxis.set_major_formatter(THOUSANDS)
    _legend(axes, set())
    return figure


def affinity_figure(series: Sequence[Series], context: str = "") -> Figure:
    """The affinity study's matrix: grouped bars of peak per framework, one bar per mode."""
    modes = sorted({s.case.affinity.get("mode") or "" for s in series})
    frameworks = list(dict.fromkeys(s.framework for s in series))
    figure, axes = _new(
        _title("Affinity modes", context), "framework", "peak (replies/s)", categorical=True
    )
    width = 0.8 / max(1, len(modes))
    for index, mode in enumerate(modes):
        values = []
        for framework in frameworks:
            peaks = [
                s.case.summary.peak or 0.0
                for s in series
                if s.framework == framework and s.case.affinity.get("mode") == mode
            ]
            values.append(max(peaks, default=0.0))
        positions = [i + (index - (len(modes) - 1) / 2) * width for i in range(len(frameworks))]
        axes.bar(
            positions,
            values,
            width=width,
            label=f"affinity: {mode}",
            gid=f"mode:{mode}",
            edgecolor="black",
            alpha=0.6 + 0.4 * index / max(1, len(modes) - 1),
        )
    axes.set_xticks(range(len(frameworks)), frameworks)
    _legend(axes, set())
    return figure


def _open_connections(step: Step) -> float | None:
    return float(step.figures.open if step.figures.open is not None else step.offered)


def _rss_mb(step: Step) -> float | None:
    return step.rss_max_bytes / 1e6 if step.rss_max_bytes else None


def _rss_kb_per_connection(step: Step) -> float | None:
    """What the connections added to the idle server, per connection (the runner's figure);
    the whole RSS per connection when a result has no baseline."""
    if step.figures.rss_per_connection_bytes is not None:
        return step.figures.rss_per_connection_bytes / 1e3
    connections = _open_connections(step)
    if not step.rss_max_bytes or not connections:
        return None
    return step.rss_max_bytes / 1e3 / connections


def connection_figures(series: Sequence[Series], context: str = "") -> dict[str, Figure]:
    """Connection ramps: CPU, RSS, RSS per connection and tick max against open connections,
    each framework's breaking point marked."""
    metrics: dict[str, tuple[str, str, Callable[[Step], float | None]]] = {
        "conn_cpu": ("Server CPU", "server CPU (% of one core)", lambda s: s.server_cpu_pct),
        "conn_rss": ("Server memory", "server RSS (MB)", _rss_mb),
        "conn_rss_per_connection": (
            "Memory per connection",
            "server RSS added per connection (KB)",
            _rss_kb_per_connection,
        ),
        "conn_tick_max": (
            "Event-loop responsiveness",
            "worst tick lag (ms)",
            lambda s: s.tick_ms.get("max"),
        ),
    }
    figures = {}
    for name, (title, ylabel, value) in metrics.items():
        figure, axes = _new(_title(title, context), UNIT_LABELS["conns"], ylabel)
        flags: set[str] = set()
        for one in series:
            flags |= _plot_metric(axes, one, value, x_of=_open_connections)
            breaking = one.case.summary.breaking_point
            if breaking:
                axes.axvline(
                    breaking["connections"],
                    color=one.colour,
                    linestyle=":",
                    gid="breaking:" + one.label,
                    label=f"{one.label} breaks: {breaking.get('reason', '')}",
                )
        if name == "conn_tick_max":
            ticks = [value(s) for one in series for s in one.steps]
            ticks = [t for t in ticks if t]
            if ticks and max(ticks) / max(min(ticks), 1e-3) > 100:
                axes.set_yscale("log")
        _legend(axes, flags)
        figures[name] = figure
    return figures


def ramp_figures(series: Sequence[Series], context: str = "") -> dict[str, Figure]:
    """Every figure for a rate or concurrency ramp (and the affinity matrix when present)."""
    with_steps = [s for s in series if s.steps]
    if not with_steps:
        return {}
    if _unit(with_steps) == "conns":
        figures = connection_figures(with_steps, context)
    else:
        figures = {
            "throughput": throughput_figure(with_steps, context),
            "errors": errors_figure(with_steps, context),
            "latency": latency_figure(with_steps, context),
            "cpu": cpu_figure(with_steps, context),
            "memory": memory_figure(with_steps, context),
        }
        if _unit(with_steps) == "req/s" and any(
            s.latency_ms.get("p99") is not None for one in with_steps for s in one.steps
        ):
            figures["latency_rate"] = latency_rate_figure(with_steps, context)
            spectrum_plot = spectrum_figure(with_steps, context)
            if spectrum_plot is not None:
                figures["spectrum"] = spectrum_plot
    figures["peak"] = peak_figure(series, context)
    efficiency = efficiency_figure(series, context)
    if efficiency is not None:
        figures["efficiency"] = efficiency
    if len({s.case.affinity.get("mode") for s in series}) > 1:
        figures["affinity"] = affinity_figure(series, context)
    if len({s.case.protocol for s in series}) > 1:
        figures["protocols"] = protocol_figure(series, context)
    return figures


def close_all(figures: dict[str, Figure]) -> None:
    for figure in figures.values():
        plt.close(figure)

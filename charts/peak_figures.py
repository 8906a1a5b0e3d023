"""Bars per server: its peak (with its 95 % interval and its rounds), its CPU per reply at
the peak, its peak per protocol, and its peak under each CPU affinity mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from charts.drawing import THOUSANDS, Series, legend, new_axes, titled


def peak_figure(series: Sequence[Series], context: str = "") -> Figure:
    """Peak sustained throughput per framework (baselines hatched), each bar with its 95 %
    interval as an error bar and its rounds' peaks as dots beside it (kept-out rounds
    hollow) when it was measured in rounds."""
    figure, axes = new_axes(
        titled("Peak sustained throughput", context),
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
    figure, axes = new_axes(
        titled("CPU per reply at the peak (lower is leaner)", context),
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
    figure, axes = new_axes(
        titled("Peak per protocol", context), "server", "peak (replies/s)", categorical=True
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
    legend(axes, set())
    return figure


def affinity_figure(series: Sequence[Series], context: str = "") -> Figure:
    """The affinity study's matrix: grouped bars of peak per framework, one bar per mode."""
    modes = sorted({s.case.affinity.get("mode") or "" for s in series})
    frameworks = list(dict.fromkeys(s.framework for s in series))
    figure, axes = new_axes(
        titled("Affinity modes", context), "framework", "peak (replies/s)", categorical=True
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
    legend(axes, set())
    return figure

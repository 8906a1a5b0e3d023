"""What every figure shares: a `Series` to draw, a new axes with its offered-load axis, one
line per series with its flagged steps hollow, and the legend beside the plot.

Steps flagged `driver_bound` or `noisy` are drawn hollow, and the legend says so. A
framework keeps its colour in every figure and every run (charts.style).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, MaxNLocator, StrMethodFormatter

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
        """The case's steps, in ramp order."""
        return self.case.steps

    @property
    def colour(self) -> str:
        """The server's colour: its look's, or its fixed one when drawn alone."""
        return self.look.colour if self.look is not None else colour_for(self.framework)

    @property
    def marker(self) -> str:
        """The server's marker: its look's, or a dot when drawn alone."""
        return self.look.marker if self.look is not None else "o"


def new_axes(
    title: str, xlabel: str, ylabel: str, categorical: bool = False
) -> tuple[Figure, plt.Axes]:
    """A figure of FIGSIZE with one axes, titled and labelled; an offered-load x axis
    unless `categorical` (bars per server, gridded along y only)."""
    figure, axes = plt.subplots(figsize=FIGSIZE, layout="constrained")
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3, axis="y" if categorical else "both")
    if not categorical:
        # 8, not 12: a load written with its separators ("184,000") is 7-9 characters,
        # and 13 of them ran into each other under a 5.5-inch axis
        load_axis(axes, nbins=8)
    return figure, axes


THOUSANDS = StrMethodFormatter("{x:,.0f}")


def _load_tick(value: float, _position: int) -> str:
    """An offered load on the x axis with thousands separators (240,000, not 240000), its
    fraction kept where a tick has one (2.5)."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,g}"


LOAD_TICKS = FuncFormatter(_load_tick)


def load_axis(axes: plt.Axes, nbins: int) -> None:
    """An offered-load x axis: at most `nbins` ticks, each with its separators."""
    axes.xaxis.set_major_locator(MaxNLocator(nbins=nbins))
    axes.xaxis.set_major_formatter(LOAD_TICKS)


def log_minor_label(value: float, _position: int) -> str:
    """A log axis's minor ticks labelled at 2 and 5 of each decade (20,000, 50,000), in the
    major ticks' style rather than matplotlib's 2×10⁴."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value))
    return f"{value:,.0f}" if round(mantissa) in (2, 5) else ""


def legend(
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


def plot_metric(
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


def ramp_unit(series: Sequence[Series]) -> str:
    """The unit of the first series' steps (req/s, concurrency, conns); req/s without any."""
    return series[0].steps[0].unit if series and series[0].steps else "req/s"


def titled(what: str, context: str) -> str:
    """A figure's title: what it draws, then its context (the run or the overlay) if any."""
    return f"{what} — {context}" if context else what


def rss_mb(step: Step) -> float | None:
    """The step's largest server RSS in MB; None when it was not measured."""
    return step.rss_max_bytes / 1e6 if step.rss_max_bytes else None

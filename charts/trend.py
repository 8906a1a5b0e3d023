"""`harness trend`'s chart: each case's peak across runs, a panel per case, steps marked.
A bench's trend is drawn alike: each figure's ratio ours / minimal across bench runs, the
bench's limit (≥ 0.95×, ≤ 1.25×) a dashed line on its panel.

One panel per case (its own y scale, so nginx's 10× peak does not flatten the rest), the
runs in order on a shared x axis, each peak with its 95 % interval as an error bar. A step
larger than noise (harness.history.steps_beyond_noise: consecutive intervals that do not
overlap) is marked by a red ring on the later run and the ratio beside it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import StrMethodFormatter

from charts.style import DPI, Look, palette

STEP_COLOUR = "#cf222e"
MAX_TICK_LABELS = 12  # more runs than this: every k-th run labelled
_RUN_ID = re.compile(r"^\d{4}(\d{2})(\d{2})-(\d{2})(\d{2})")


class TrendPoint(Protocol):
    """What the chart needs of one peak (harness.history.TrendPoint)."""

    @property
    def run_id(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def interval(self) -> tuple[float, float] | None: ...


def short_run_label(run_id: str) -> str:
    """`20261130-170804.123-quick` as `11-30 17:08` (UTC); another name as it is."""
    match = _RUN_ID.match(run_id)
    return f"{match[1]}-{match[2]} {match[3]}:{match[4]}" if match else run_id


def trend_figure(
    run_ids: Sequence[str],
    series: Mapping[str, Sequence[TrendPoint]],
    steps: Mapping[str, Sequence[int]],
    title: str,
    unit: str = "req/s",
    *,
    what: str = "peak",
    value_format: str = "{x:,.0f}",
    limits: Mapping[str, float] | None = None,
) -> Figure:
    """A panel per series (label → points in run order); `steps[label]` are the indices
    into its points where a step begins. Each marker has a gid (`peak:<label>`,
    `step:<label>:<run id>`) so tests can ask what was drawn. `what` names the value
    (`peak`, or a bench's `ratio`), `value_format` its axis, `limits[label]` a dashed
    line (a bench's limit)."""
    labels = list(series) or ["(no peaks)"]
    columns = min(3, len(labels))
    rows = math.ceil(len(labels) / columns)
    figure, axes_grid = plt.subplots(
        rows,
        columns,
        # one panel: wide enough for the axis label under it
        figsize=(max(4.6 * columns, 7.5), 2.6 * rows + 1.2),
        sharex=True,
        squeeze=False,
        layout="constrained",
    )
    figure.suptitle(title)
    position = {run_id: index for index, run_id in enumerate(run_ids)}
    looks = palette(label.split(" ")[0] for label in labels)
    for index, axes in enumerate(axes_grid.flat):
        if index >= len(labels) or labels[index] not in series:
            axes.set_visible(index < len(labels))
            continue
        label = labels[index]
        _draw_panel(
            axes,
            label,
            series[label],
            steps.get(label, ()),
            position,
            looks[label.split(" ")[0]],
            value_format,
            limits.get(label) if limits else None,
        )
    _label_runs(axes_grid.flat, run_ids)
    figure.supxlabel(  # two lines: one panel's width holds each
        f"run (UTC start); bars: 95 % interval of the {what}\nred ring: a step beyond the noise"
        + ("; dashed: the limit" if limits else "")
    )
    figure.supylabel(f"{what} {unit}")
    return figure


def _draw_panel(
    axes: Axes,
    label: str,
    points: Sequence[TrendPoint],
    marked: Sequence[int],
    position: Mapping[str, int],
    look: Look,
    value_format: str,
    limit: float | None,
) -> None:
    """One series' panel: each value with its interval as an error bar, each step in
    `marked` ringed with its ratio, and `limit` as a dashed line when there is one."""
    xs = [position[p.run_id] for p in points]
    ys = [p.value for p in points]
    below = [p.value - p.interval[0] if p.interval else 0.0 for p in points]
    above = [p.interval[1] - p.value if p.interval else 0.0 for p in points]
    axes.errorbar(xs, ys, yerr=[below, above], color=look.colour, marker=look.marker,
                  markersize=4, capsize=3, linewidth=1.2, gid=f"peak:{label}")  # fmt: skip
    for step in marked:
        _ring_step(axes, label, points[step - 1], points[step], position[points[step].run_id])
    if limit is not None:
        axes.axhline(limit, color="#666", linestyle="--", linewidth=1,
                     gid=f"limit:{label}")  # fmt: skip
    axes.set_title(label + (f" — {len(marked)} step(s)" if marked else ""), fontsize=10)
    axes.yaxis.set_major_formatter(StrMethodFormatter(value_format))
    axes.grid(True, alpha=0.3)


def _ring_step(axes: Axes, label: str, before: TrendPoint, after: TrendPoint, x: int) -> None:
    """A step beyond the noise: a red ring on the later run's value, the ratio beside it."""
    axes.plot(
        [x],
        [after.value],
        marker="o",
        markersize=11,
        markerfacecolor="none",
        markeredgecolor=STEP_COLOUR,
        markeredgewidth=1.8,
        linestyle="none",
        gid=f"step:{label}:{after.run_id}",
    )
    axes.annotate(
        f"{after.value / before.value:.2f}×",
        (x, after.value),
        textcoords="offset points",
        xytext=(6, 6),
        color=STEP_COLOUR,
        fontsize=8,
    )


def _label_runs(panels: Iterable[Axes], run_ids: Sequence[str]) -> None:
    """The runs' short labels under every panel (a panel may be the last in its column),
    every k-th run past MAX_TICK_LABELS."""
    every = max(1, math.ceil(len(run_ids) / MAX_TICK_LABELS))
    ticks = list(range(0, len(run_ids), every))
    for axes in panels:
        axes.set_xticks(ticks)
        axes.set_xticklabels([short_run_label(run_ids[i]) for i in ticks], rotation=45,
                             ha="right", fontsize=8)  # fmt: skip
        axes.tick_params(labelbottom=True)


def write_trend(
    path: Path,
    run_ids: Sequence[str],
    series: Mapping[str, Sequence[TrendPoint]],
    steps: Mapping[str, Sequence[int]],
    title: str,
    unit: str = "req/s",
    **how: object,
) -> Path:
    """Draw the trend into `path` (a PNG); returns the path. `how`: trend_figure's
    keyword-only options (what, value_format, limits)."""
    figure = trend_figure(run_ids, series, steps, title, unit, **how)  # type: ignore[arg-type]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, dpi=DPI)
    finally:
        plt.close(figure)
    return path

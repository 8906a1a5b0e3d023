"""Figures from result files: one line per framework against the offered load.

Every builder takes `Series` (one case of one run, already labelled) and returns a
matplotlib Figure, so tests can ask what was drawn. Steps flagged `driver_bound` or
`noisy` are drawn hollow, and the legend says so. A framework keeps its colour in every
figure and every run (charts.style). Latency read at a concurrency (closed loop: wrk, ab,
siege) says so in its title; open-loop rate ramps get the latency against the offered
rate with each framework's knee, and the percentile spectrum at a rate all of them held.

The builders live by what they draw: charts.drawing (what every figure shares, `Series`),
charts.load_figures (against the offered load), charts.connection_figures (against open
connections), charts.peak_figures (bars per server), charts.attack_figures (the h2-attacks
rounds). `ramp_figures` draws the set charts.figure_kinds names for the cases' ramp kind;
every builder is importable from here as well.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from charts.attack_figures import attack_p99_figure, attack_peak_figure, attacks_figure
from charts.connection_figures import connection_figures
from charts.drawing import Series
from charts.figure_kinds import FIGURES_BY_RAMP_KIND, ramp_kind
from charts.load_figures import (
    common_held_rate,
    cpu_figure,
    errors_figure,
    latency_figure,
    latency_rate_figure,
    memory_figure,
    spectrum_figure,
    throughput_figure,
)
from charts.peak_figures import affinity_figure, efficiency_figure, peak_figure, protocol_figure

__all__ = [
    "FIGURE_BUILDERS",
    "Series",
    "affinity_figure",
    "attack_p99_figure",
    "attack_peak_figure",
    "attacks_figure",
    "close_all",
    "common_held_rate",
    "connection_figures",
    "cpu_figure",
    "efficiency_figure",
    "errors_figure",
    "latency_figure",
    "latency_rate_figure",
    "memory_figure",
    "peak_figure",
    "protocol_figure",
    "ramp_figures",
    "spectrum_figure",
    "throughput_figure",
]


FigureBuilder = Callable[[Sequence[Series], str], Figure | dict[str, Figure] | None]


def _lines(
    builder: Callable[[Sequence[Series], str], Figure | dict[str, Figure]],
) -> FigureBuilder:
    """`builder` given only the cases that have steps (a line needs points)."""
    return lambda series, context: builder([s for s in series if s.steps], context)


def _latency_rate(series: Sequence[Series], context: str) -> Figure | None:
    """The open-loop latency against the offered rate, when a step measured a p99."""
    if _latency_rate_measured(series):
        return latency_rate_figure([s for s in series if s.steps], context)
    return None


def _spectrum(series: Sequence[Series], context: str) -> Figure | None:
    """The percentile spectrum, under the same condition as the latency against rate."""
    if _latency_rate_measured(series):
        return spectrum_figure([s for s in series if s.steps], context)
    return None


def _latency_rate_measured(series: Sequence[Series]) -> bool:
    """Whether any step measured a p99 (httperf's rate ramps measure none)."""
    return any(s.latency_ms.get("p99") is not None for one in series for s in one.steps)


def _affinity(series: Sequence[Series], context: str) -> Figure | None:
    """The affinity matrix, when the cases ran under more than one affinity mode."""
    if len({s.case.affinity.get("mode") for s in series}) > 1:
        return affinity_figure(series, context)
    return None


def _protocols(series: Sequence[Series], context: str) -> Figure | None:
    """The peak per protocol, when the cases spoke more than one protocol."""
    if len({s.case.protocol for s in series}) > 1:
        return protocol_figure(series, context)
    return None


# each name of charts.figure_kinds.FIGURES_BY_RAMP_KIND, and what draws it
FIGURE_BUILDERS: dict[str, FigureBuilder] = {
    "throughput": _lines(throughput_figure),
    "errors": _lines(errors_figure),
    "latency": _lines(latency_figure),
    "cpu": _lines(cpu_figure),
    "memory": _lines(memory_figure),
    "latency_rate": _latency_rate,
    "spectrum": _spectrum,
    "connections": _lines(connection_figures),
    "peak": peak_figure,
    "efficiency": efficiency_figure,
    "affinity": _affinity,
    "protocols": _protocols,
    "attack_peak": attack_peak_figure,
    "attacks": attacks_figure,
    "attack_p99": attack_p99_figure,
}


def ramp_figures(series: Sequence[Series], context: str = "") -> dict[str, Figure]:
    """Every figure the cases' ramp kind draws (charts.figure_kinds: FIGURES_BY_RAMP_KIND,
    the kind read from their steps by ramp_kind), by name, in its order; nothing when no
    case has a step."""
    if not any(s.steps for s in series):
        return {}
    figures: dict[str, Figure] = {}
    for name in FIGURES_BY_RAMP_KIND[ramp_kind([s.case for s in series])]:
        drawn = FIGURE_BUILDERS[name](series, context)
        if isinstance(drawn, dict):
            figures.update(drawn)
        elif drawn is not None:
            figures[name] = drawn
    return figures


def close_all(figures: dict[str, Figure]) -> None:
    """Close every figure (pyplot keeps each one open until told)."""
    for figure in figures.values():
        plt.close(figure)

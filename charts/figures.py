"""Figures from result files: one line per framework against the offered load.

Every builder takes `Series` (one case of one run, already labelled) and returns a
matplotlib Figure, so tests can ask what was drawn. Steps flagged `driver_bound` or
`noisy` are drawn hollow, and the legend says so. A framework keeps its colour in every
figure and every run (charts.style). Latency read at a concurrency (closed loop: wrk, ab,
siege) says so in its title; open-loop rate ramps get the latency against the offered
rate with each framework's knee, and the percentile spectrum at a rate all of them held.

The builders live by what they draw: charts.drawing (what every figure shares, `Series`),
charts.load_figures (against the offered load), charts.connection_figures (against open
connections), charts.peak_figures (bars per server). `ramp_figures` picks a case's set;
every builder is importable from here as well.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from charts.attack_figures import attacks_figure
from charts.connection_figures import connection_figures
from charts.drawing import Series, ramp_unit
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
    "Series",
    "affinity_figure",
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


def ramp_figures(series: Sequence[Series], context: str = "") -> dict[str, Figure]:
    """Every figure for a rate or concurrency ramp (and the affinity matrix when present)."""
    with_steps = [s for s in series if s.steps]
    if not with_steps:
        return {}
    if ramp_unit(with_steps) == "conns":
        figures = connection_figures(with_steps, context)
    else:
        figures = {
            "throughput": throughput_figure(with_steps, context),
            "errors": errors_figure(with_steps, context),
            "latency": latency_figure(with_steps, context),
            "cpu": cpu_figure(with_steps, context),
            "memory": memory_figure(with_steps, context),
        }
        if ramp_unit(with_steps) == "req/s" and any(
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
    attacks = attacks_figure(series, context)
    if attacks is not None:
        figures["attacks"] = attacks
    return figures


def close_all(figures: dict[str, Figure]) -> None:
    """Close every figure (pyplot keeps each one open until told)."""
    for figure in figures.values():
        plt.close(figure)

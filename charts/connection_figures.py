"""Figures of connection ramps: server CPU, memory, memory per connection and the worst
event-loop tick against open connections, each framework's breaking point marked."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from matplotlib.figure import Figure

from charts.drawing import UNIT_LABELS, Series, legend, new_axes, plot_metric, rss_mb, titled
from model.results import Step


def _open_connections(step: Step) -> float | None:
    """The connections a step held open (its offered count when the step did not say)."""
    return float(step.figures.open if step.figures.open is not None else step.offered)


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
        "conn_rss": ("Server memory", "server RSS (MB)", rss_mb),
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
        figure, axes = new_axes(titled(title, context), UNIT_LABELS["conns"], ylabel)
        flags: set[str] = set()
        for one in series:
            flags |= plot_metric(axes, one, value, x_of=_open_connections)
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
        legend(axes, flags)
        figures[name] = figure
    return figures

"""What a connection ramp reads at each hold, and the memory figures made from the holds.

A hold becomes a Step (`hold_step`): connections held, failures, messages, the monitor's
CPU and the server's RSS over the hold, and the memory read at the hold's end (the
server's cgroup and the host's: `HOST_READINGS`). Over the held steps: memory per
connection (the server's RSS, its cgroup) and where the memory went at the top step
(`memory_breakdown`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.connections.breaking import LIMIT_REASONS, RampSecond, delta, total
from harness.monitor import Monitor
from harness.step_stats import step_stats
from model.results import LATENCY_KEYS, Step
from model.step_figures import CgroupCounters, StepFigures

if TYPE_CHECKING:
    from harness.topology import Topology

# The host's memory at each hold's end, read by the monitor (harness.monitor.sample): what
# the whole box had left, the kernel's slab (every socket's own objects, both ends here),
# TCP's buffers and conntrack's entries in the server's namespace.
HOST_READINGS = {
    "host_available_bytes": "mem_available_bytes",
    "kernel_slab_bytes": "kernel_slab_bytes",
    "tcp_buffer_bytes": "tcp_buffer_bytes",
    "conntrack_count": "conntrack_count",
}
NO_WINDOW_STATS: dict[str, Any] = {
    "server_cpu_pct": None,
    "agent_cpu_pct": None,
    "rss_max_bytes": None,
    "tick_ms": {"avg": None, "max": None},
}


def held_reading(rows: list[dict[str, Any]], key: str, start_t: float, held_t: float) -> int | None:
    """The monitor's `key` in its last row in (`start_t`, `held_t`]: a hold from its start
    to `held_t`, the time every agent was last seen holding (none began closing before
    it); None when no such row read it."""
    held = [row[key] for row in rows if start_t < row["t"] <= held_t and row.get(key) is not None]
    return int(held[-1]) if held else None


def held_cgroup_bytes(rows: list[dict[str, Any]], start_t: float, held_t: float) -> int | None:
    """The server cgroup's memory at a hold's end (held_reading)."""
    return held_reading(rows, "server_cgroup_memory_bytes", start_t, held_t)


def _window_stats(monitor: Monitor, server: Topology, until: float | None) -> dict[str, Any]:
    """The monitor's figures over the step's window, which ends here (monitor.step_stats)."""
    open_window = monitor.windows and monitor.windows[-1].ended is None
    window = monitor.end_step() if open_window else None
    if not window:
        return dict(NO_WINDOW_STATS)
    return step_stats(monitor.rows, server.telemetry_lines(), window, until)


def _held_memory(
    rows: list[dict[str, Any]], start: RampSecond, end: RampSecond, stats: dict[str, Any]
) -> dict[str, Any]:
    """The memory read at the hold's end: the server's cgroup (every process, sockets'
    buffers included where the controller counts them) and the host's readings."""
    held_t = end.agents.get("t", end.t)
    # read while every agent still held, not at the window's end: for the top step that
    # comes after the agents began closing, and the closing frees memory as it goes
    cgroup_bytes = held_cgroup_bytes(rows, start.t, held_t)
    if cgroup_bytes is None:
        cgroup_bytes = (stats.get("cgroup") or {}).get("memory_bytes")
    readings: dict[str, Any] = {} if cgroup_bytes is None else {"cgroup_memory_bytes": cgroup_bytes}
    for name, key in HOST_READINGS.items():
        value = held_reading(rows, key, start.t, held_t)
        if value is not None:
            readings[name] = value
    return readings


def _step_errors(start: dict[str, Any], end: dict[str, Any]) -> tuple[dict[str, float], int]:
    """The errors so far by reason (failed_<why>, closed_<why>, `total`), and those of
    this step alone: the agents' combined lines at the hold's start and end."""
    failed = delta(end["failed"], {})
    dropped = delta(end["closed_by_server"], {})
    errors: dict[str, float] = {
        "total": total(failed) + total(dropped),
        **{f"failed_{k}": v for k, v in failed.items()},
        **{f"closed_{k}": v for k, v in dropped.items()},
    }
    in_step = (
        total(end["failed"])
        - total(start["failed"])
        + total(end["closed_by_server"])
        - total(start["closed_by_server"])
    )
    return errors, in_step


def hold_step(
    target: float,
    start: RampSecond,
    end: RampSecond,
    *,
    monitor: Monitor,
    server: Topology,
    baseline_rss_bytes: int | None,
    until: float | None = None,
) -> Step:
    """A held target as a Step: connections held, failures, messages, memory per
    connection; `until`: when the agents began closing, if they had (monitor.step_stats)."""
    stats = _window_stats(monitor, server, until)
    agents = end.agents
    span_s = max(1e-6, end.t - start.t)
    errors, errors_in_step = _step_errors(start.agents, agents)
    open_now = agents["open"]
    rss = stats["rss_max_bytes"]
    limit_capped = any(f"failed_{reason}" in errors for reason in LIMIT_REASONS)
    figures = StepFigures(
        open=open_now,
        errors_in_step=errors_in_step,
        messages_out_per_s=round(
            (agents["messages_sent"] - start.agents["messages_sent"]) / span_s, 1
        ),
        messages_in_per_s=round((end.messages - start.messages) / span_s, 1),
        # what the connections added to the idle server, per connection
        rss_per_connection_bytes=round((rss - (baseline_rss_bytes or 0)) / open_now)
        if rss and open_now
        else None,
        **_held_memory(monitor.rows, start, end, stats),
        cgroup=CgroupCounters(**stats["cgroup"]) if stats.get("cgroup") else None,
        agent_rss_bytes=agents["rss_bytes"],
        hold_s=round(span_s, 1),
        hosts=agents.get("hosts"),
    )
    return Step(
        offered=target,
        unit="conns",
        achieved=float(open_now),
        replies=agents["opened"],
        errors=errors,
        error_rate=min(1.0, errors["total"] / max(1, agents["attempts"])),
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=rss,
        tick_ms=stats["tick_ms"],
        flags=("limit_capped",) if limit_capped else (),
        figures=figures,
    )


def _slope_kb(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of bytes over connections, in KB; None with fewer than two
    distinct connection counts."""
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return round(statistics.linear_regression(xs, ys).slope / 1024, 2)


def memory_breakdown(steps: list[Step], idle: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where the memory went at the top held step — the server (RSS, and its cgroup:
    sockets' buffers and kernel objects where counted), the agents, the kernel's slab
    and the whole host — each also as KB per connection (the slope over the held steps,
    from the idle reading `idle`, a monitor row before any connection). None without a
    held step."""
    held = [s for s in steps if s.figures.open]
    if not held:
        return None
    top = held[-1]
    idle = idle or {}

    def series(read: Callable[[Step], float | None], idle_value: float | None) -> float | None:
        points = [(0.0, float(idle_value))] if idle_value is not None else []
        points += [(float(s.figures.open), float(v)) for s in held if (v := read(s)) is not None]
        return _slope_kb(points)

    available_idle = idle.get("mem_available_bytes")
    slab_idle = idle.get("kernel_slab_bytes")
    top_available = top.figures.host_available_bytes
    top_slab = top.figures.kernel_slab_bytes
    return {
        "connections": top.figures.open,
        "server_rss_bytes": top.rss_max_bytes,
        "server_cgroup_bytes": top.figures.cgroup_memory_bytes,
        "agents_rss_bytes": top.figures.agent_rss_bytes,
        "kernel_slab_bytes": top_slab,
        "kernel_slab_growth_bytes": top_slab - slab_idle
        if top_slab is not None and slab_idle is not None
        else None,
        "tcp_buffer_bytes": top.figures.tcp_buffer_bytes,
        "host_available_bytes": top_available,
        "host_used_growth_bytes": available_idle - top_available
        if top_available is not None and available_idle is not None
        else None,
        "conntrack_count": top.figures.conntrack_count,
        "kb_per_connection": {
            "server_rss": series(lambda s: s.rss_max_bytes, idle.get("server_rss_bytes")),
            "server_cgroup": series(
                lambda s: s.figures.cgroup_memory_bytes,
                idle.get("server_cgroup_memory_bytes"),
            ),
            "agents_rss": series(lambda s: s.figures.agent_rss_bytes, None),
            "kernel_slab": series(lambda s: s.figures.kernel_slab_bytes, slab_idle),
            # the whole box: what it had available, fallen per connection
            "host": series(
                lambda s: (
                    -s.figures.host_available_bytes
                    if s.figures.host_available_bytes is not None
                    else None
                ),
                -available_idle if available_idle is not None else None,
            ),
        },
    }


def cgroup_kb_per_connection(steps: list[Step], baseline_bytes: int | None) -> float | None:
    """KB of the server's cgroup memory per open connection: the slope of
    `figures.cgroup_memory_bytes` over the held steps (from the idle group's, when read);
    None with fewer than two points (no cgroup)."""
    points = [
        (s.figures.open, s.figures.cgroup_memory_bytes)
        for s in steps
        if s.figures.cgroup_memory_bytes is not None and s.figures.open
    ]
    if baseline_bytes is not None and points:
        points.insert(0, (0, baseline_bytes))
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None
    slope = statistics.linear_regression([p[0] for p in points], [p[1] for p in points]).slope
    return round(slope / 1024, 2)


def memory_per_connection(steps: list[Step], baseline_rss_bytes: int | None) -> float | None:
    """Bytes of server RSS per open connection: the slope over the held steps (from the
    idle server's `baseline_rss_bytes`, when read); None with fewer than two points."""
    points = [
        (s.figures.open, s.rss_max_bytes) for s in steps if s.rss_max_bytes and s.figures.open
    ]
    if baseline_rss_bytes:
        points.insert(0, (0, baseline_rss_bytes))
    if len(points) < 2:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    slope = statistics.linear_regression(xs, ys).slope
    return round(slope, 1)

"""A step's figures from the monitor's samples: the window a step ran in (`StepWindow`,
with the CPU clocks and cgroup readings at its two ends), the server's CPU over it
(exact from the clocks, or its cgroup's counter), RSS, CPU wait, tick lag and the sink's
errors (`step_stats`), the server's replies per second (`replies_per_second`), and the
workers' telemetry lines merged into one (`merge_telemetry`). Pure: no process is read."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Any

from harness.cgroups.files import CgroupReading
from harness.host_readings import CpuSnapshot

TELEMETRY_SUMS = (
    "open",
    "requests",
    "messages",
    "bad",
    "stored",
    "sink_errors",
    "backlog",
    "gc_collections",
    "rss_bytes",
)
TELEMETRY_MAXIMA = ("tick_avg_ms", "tick_max_ms", "gc_pause_ms")


@dataclass(frozen=True)
class StepWindow:
    """The window one step ran in (`Monitor.begin_step`/`end_step`), with what was read
    at its two ends."""

    index: int
    started: float
    ended: float | None = None
    cpu_before: CpuSnapshot | None = None
    cpu_after: CpuSnapshot | None = None
    # the server tree's CPU seconds per process at the step's start and end
    # (read by harness.monitor): its exact CPU over the window (`window_cpu_pct`)
    server_cpu_s_before: dict[int, float] | None = None
    server_cpu_s_after: dict[int, float] | None = None
    # the server's cgroup at the step's start and end (None: it runs in none)
    server_cgroup_before: CgroupReading | None = None
    server_cgroup_after: CgroupReading | None = None
    # the case's load cgroup (every load generator of the step) at its start and end
    load_cgroup_before: CgroupReading | None = None
    load_cgroup_after: CgroupReading | None = None
    # the database's cgroup (FerretDB, PostgreSQL and its backends) at its start and end
    database_cgroup_before: CgroupReading | None = None
    database_cgroup_after: CgroupReading | None = None


def cgroup_step(before: CgroupReading, after: CgroupReading) -> dict[str, Any]:
    """What a cgroup counted between two readings: CPU seconds, CFS periods throttled (of
    those with work) and the time throttled, the OOM kills, and its memory at the end."""
    return {
        "cpu_s": round(max(0.0, after.cpu_s - before.cpu_s), 6),
        "throttled_periods": max(0, after.throttled_periods - before.throttled_periods),
        "periods": max(0, after.periods - before.periods),
        "throttled_s": round(max(0.0, after.throttled_s - before.throttled_s), 6),
        "oom_kills": max(0, after.oom_kills - before.oom_kills),
        "memory_bytes": after.memory_bytes,
    }


def window_cpu_pct(
    before: dict[int, float], after: dict[int, float], wall_s: float
) -> float | None:
    """% of one core some processes used between two readings of their CPU seconds: each
    process's gain, one started in between counted from 0 (all its time is the window's);
    one that ended in between is lost unless its parent reaped it (the parent's clock has
    it then). None for a window with no wall time."""
    if wall_s <= 0:
        return None
    used_s = sum(max(0.0, cpu_s - before.get(pid, 0.0)) for pid, cpu_s in after.items())
    return used_s / wall_s * 100.0


def merge_telemetry(latest_by_pid: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Every worker's newest line as one: counts summed, lags and pauses at their maximum."""
    if not latest_by_pid:
        return {}
    lines = list(latest_by_pid.values())
    merged: dict[str, Any] = {"workers": len(lines)}
    for key in TELEMETRY_SUMS:
        merged["telemetry_" + key if key == "rss_bytes" else key] = sum(
            int(line.get(key, 0)) for line in lines
        )
    for key in TELEMETRY_MAXIMA:
        merged[key] = max(float(line.get(key, 0.0)) for line in lines)
    merged["max_open"] = sum(int(line.get("max_open", 0)) for line in lines)
    return merged


def step_stats(
    rows: list[dict[str, Any]],
    telemetry: list[dict[str, Any]],
    window: StepWindow,
    until: float | None = None,
) -> dict[str, Any]:
    """Server/agent/database CPU and server/agent CPU wait (mean), RSS (max), tick lag
    (mean of avgs, max of maxima), and the sink's records refused (`sink_errors` gained)
    and waiting (`backlog`, max) in a window; `db_cpu_pct` None when no database was
    watched. `until`: the samples and telemetry read end there when the window was closed
    later than the step really ended (a connection ramp's top step, seen closing late)."""
    end = window.ended or time.time()
    if until is not None:
        end = min(end, until)
    inside = [r for r in rows if window.started < r["t"] <= end + 0.5]
    lines = [t for t in telemetry if window.started < t["t"] <= end + 0.5]
    stats: dict[str, Any] = {
        "server_cpu_pct": None,
        "agent_cpu_pct": None,
        "db_cpu_pct": None,
        "server_cpu_wait_pct": None,
        "agent_cpu_wait_pct": None,
        "rss_max_bytes": None,
        "tick_ms": {"avg": None, "max": None},
        "sink_errors": None,
        "backlog_max": None,
        "server_cpu_s": None,
        "cgroup": None,
    }
    if inside:  # the 1 s samples overlapping the step's edges (charts; fallbacks)
        stats["server_cpu_pct"] = round(statistics.fmean(r["server_cpu_pct"] for r in inside), 1)
        stats["agent_cpu_pct"] = round(statistics.fmean(r["agent_cpu_pct"] for r in inside), 1)
        stats["rss_max_bytes"] = max(r["server_rss_bytes"] for r in inside)
        for key in ("server_cpu_wait_pct", "agent_cpu_wait_pct"):
            waits = [r[key] for r in inside if r.get(key) is not None]
            stats[key] = round(statistics.fmean(waits), 1) if waits else None
        database = [r["db_cpu_pct"] for r in inside if "db_cpu_pct" in r]
        if database:
            stats["db_cpu_pct"] = round(statistics.fmean(database), 1)
    # the server's CPU is read at the step's two ends: exact over the step, where a mean of
    # the samples would count the idle second straddling its start (a saturated 2 s step
    # read 70 % that way)
    before, after = window.server_cpu_s_before, window.server_cpu_s_after
    wall_s = (window.ended - window.started) if window.ended is not None else 0.0
    if before is not None and after and window.ended is not None:
        exact = window_cpu_pct(before, after, wall_s)
        if exact is not None:
            stats["server_cpu_pct"] = round(exact, 1)
            stats["server_cpu_s"] = round(exact * wall_s / 100.0, 6)
    # in a cgroup: its usage counter, every process the server started (a daemon that
    # left the process tree included)
    if window.server_cgroup_before is not None and window.server_cgroup_after is not None:
        counted = cgroup_step(window.server_cgroup_before, window.server_cgroup_after)
        stats["cgroup"] = counted
        stats["server_cpu_s"] = counted["cpu_s"]
        if wall_s > 0:
            stats["server_cpu_pct"] = round(counted["cpu_s"] / wall_s * 100.0, 1)
    # the database in its group: exact over the step too (its backends forked since included)
    db_before, db_after = window.database_cgroup_before, window.database_cgroup_after
    if db_before is not None and db_after is not None and wall_s > 0:
        db_cpu_s = max(0.0, db_after.cpu_s - db_before.cpu_s)
        stats["db_cpu_pct"] = round(db_cpu_s / wall_s * 100.0, 1)
    # sink_errors counts since the server started: the step's share is its gain
    counted = [r for r in rows if "sink_errors" in r and r["t"] <= end + 0.5]
    errors = [r["sink_errors"] for r in counted]
    errors_before = [r["sink_errors"] for r in counted if r["t"] <= window.started]
    if len(errors) > len(errors_before):  # a telemetry row inside the window
        stats["sink_errors"] = errors[-1] - (errors_before[-1] if errors_before else errors[0])
        stats["backlog_max"] = max(r["backlog"] for r in inside if "backlog" in r)
    if lines:
        stats["tick_ms"] = {
            "avg": round(statistics.fmean(t["tick_avg_ms"] for t in lines), 3),
            "max": round(max(t["tick_max_ms"] for t in lines), 3),
        }
    return stats


def replies_per_second(telemetry: list[dict[str, Any]], window: StepWindow) -> list[float]:
    """The server's replies in each whole telemetry interval inside a step's window, per
    second: each worker's `requests` counter differenced line to line (its lines come once
    a second), the workers summed by interval. Intervals that straddle the window's start
    or end (the load starting, stopping) are left out; empty without telemetry."""
    end = window.ended or time.time()
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for line in telemetry:
        if "requests" in line and "t" in line:
            by_pid.setdefault(int(line.get("pid", 0)), []).append(line)
    buckets: dict[int, float] = {}
    for lines in by_pid.values():
        lines.sort(key=lambda line: line["t"])
        for before, after in itertools.pairwise(lines):
            span_s = after["t"] - before["t"]
            if span_s <= 0 or before["t"] < window.started or after["t"] > end:
                continue
            second = int(after["t"] - window.started)
            rate = (int(after["requests"]) - int(before["requests"])) / span_s
            buckets[second] = buckets.get(second, 0.0) + rate
    return [round(buckets[second], 1) for second in sorted(buckets)]

"""Harness side of the agent: splitting connections over processes and source addresses,
building their command lines, and reading their per-second lines back.

One process holds at most `nofile - headroom` sockets (20,000 here), and one source address
has only the ephemeral port range (~28,000 here) toward one server port, so N connections
are split over ceil(N / per_process) processes, each connecting from its own 127.0.0.x.
"""

from __future__ import annotations

import json
import math
import resource
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from drivers.base import DriverOptions
    from model.ramps import Ramp

FD_HEADROOM = 100  # stdio, the event loop's own descriptors, imports
FIRST_SOURCE_HOST = 2  # 127.0.0.2, 127.0.0.3, ... (127.0.0.1 stays the server's)
# Source addresses per agent process, used in turn. With one address the kernel's search
# for a free source port grew with every connection: one process opened 3,700/s at first
# and under 1,000/s past 8,000 connections; with eight it held 3,200-3,700/s to 12,000.
SOURCES_PER_PROCESS = 8


class AgentDriver:
    """Our WebSocket agent as the registry knows it: connection ramps, whose agent processes
    hold their connections across every step (harness.connections runs them, with the
    command lines and line parser below), not one step's processes at a time."""

    name = "agent"
    tool = "python"  # `python -m drivers.agent`: ships with the harness
    package = None
    tool_version_args = ("--version",)
    ramp_kinds = ("connections",)
    checks_bodies = False  # WebSocket messages, not HTTP bodies

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        return cls()


def read_port_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def per_process_limit() -> int:
    """Sockets one agent process may hold: the open-file limit (or the ports of its
    addresses, were they fewer), less headroom."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    low, high = read_port_range()
    return max(1, min(soft, (high - low + 1) * SOURCES_PER_PROCESS) - FD_HEADROOM)


@dataclass(frozen=True)
class AgentShare:
    """One agent process: where it connects from and its connection target per step."""

    index: int
    sources: tuple[str, ...]
    schedule: tuple[int, ...]


def split_schedule(targets: list[int], per_process: int) -> list[AgentShare]:
    """Every step's target split evenly over as few processes as the largest target needs."""
    processes = max(1, math.ceil(max(targets, default=0) / per_process))
    shares = []
    for index in range(processes):
        schedule = tuple(t // processes + (1 if index < t % processes else 0) for t in targets)
        first = FIRST_SOURCE_HOST + index * SOURCES_PER_PROCESS
        sources = tuple(f"127.0.0.{first + k}" for k in range(SOURCES_PER_PROCESS))
        shares.append(AgentShare(index, sources, schedule))
    return shares


def agent_command(
    share: AgentShare,
    *,
    host: str,
    port: int,
    path: str,
    hold_s: float,
    open_rate_per_s: float,
    payload: str | None,
    interval_s: tuple[float, float] | None,
    processes: int,
) -> list[str]:
    """The agent's command line; it stops by itself a margin after its schedule's end."""
    rate = open_rate_per_s / processes
    opening_s = (max(share.schedule, default=0) / rate) if rate > 0 else 0.0
    time_limit_s = opening_s * 2 + hold_s * len(share.schedule) + 30.0
    low, high = interval_s or (3.0, 6.0)
    return [
        sys.executable,
        "-m",
        "drivers.agent",
        "--host",
        host,
        "--port",
        str(port),
        "--path",
        path,
        "--source",
        ",".join(share.sources),
        "--schedule",
        ",".join(str(n) for n in share.schedule),
        "--hold",
        f"{hold_s:g}",
        "--open-rate",
        f"{rate:g}",
        "--interval",
        f"{low:g},{high:g}",
        "--payload",
        payload or "none",
        "--time-limit",
        f"{time_limit_s:.0f}",
    ]


def parse_agent_line(line: str) -> dict[str, Any] | None:
    """One agent report line, or None for anything else it printed."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "opened" in record else None


def combine_agent_lines(latest: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The newest line of every agent process as one: counts summed, reasons merged."""
    combined: dict[str, Any] = {
        "agents": len(latest),
        "open": 0,
        "opened": 0,
        "attempts": 0,
        "messages_sent": 0,
        "send_errors": 0,
        "failed": {},
        "closed_by_server": {},
        "cpu_pct": 0.0,
        "rss_bytes": 0,
    }
    steps, phases = set(), set()
    for line in latest.values():
        for key in ("open", "opened", "attempts", "messages_sent", "send_errors", "rss_bytes"):
            combined[key] += int(line.get(key, 0))
        combined["cpu_pct"] += float(line.get("cpu_pct", 0.0))
        for group in ("failed", "closed_by_server"):
            for reason, count in line.get(group, {}).items():
                combined[group][reason] = combined[group].get(reason, 0) + int(count)
        steps.add(line.get("step"))
        phases.add(line.get("phase"))
    combined["step"] = min((s for s in steps if s is not None), default=-1)
    combined["phase"] = phases.pop() if len(phases) == 1 else "mixed"
    return combined

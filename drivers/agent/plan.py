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
import signal
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
# An agent stops by itself (--time-limit) once its opening took this many times as long as
# its open rate plans, plus its holds and a margin: a server that accepts slower than asked
# is still followed to the top step (it was 2x; a guess at why a 100,000 ramp on a local
# fleet stopped at 60,000-80,000, which proved wrong: its agents ended by their schedule,
# see harness.connections.ConnectionRampResult.cut_short).
OPENING_SLOWDOWN_ALLOWED = 6.0
STOP_REASONS = ("time-limit", "signal", "schedule")  # an agent line's `stopped_by`


class AgentDriver:
    """Our WebSocket agent as the registry knows it: connection ramps, whose agent processes
    hold their connections across every step (harness.connections runs them, with the
    command lines and line parser below), not one step's processes at a time."""

    name = "agent"
    tool = "python"  # `python -m drivers.agent`: ships with the harness
    package = None
    tool_version_args = ("--version",)
    ramp_kinds = ("connections",)
    protocols = ("h1",)
    # the agent: SIGTERM (or SIGINT) sets its stop event; it closes and prints its final line
    # (harness.connections.AgentGroup.end sends it)
    stop_signal = signal.SIGTERM
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


def connect_ports(low: int, high: int) -> int:
    """The source ports connect() hands out readily from one address toward one server
    address:port: the even half of the range `low`..`high`.

    Since Linux 4.6 connect() takes even ports and leaves odd ones to bind(); once an
    address's even ports are taken, every connect walks all of them before it tries an odd
    one. Measured here: a Node and a Twisted ramp from 36 addresses of 28,232 ports (14,116
    even) both stalled at ~506,000 connections, the kernel at 80 % system time (in
    __inet_check_established) and new handshakes timing out.
    """
    return (high - low + 1 + (low % 2 == 0)) // 2


def per_process_limit(sources_per_process: int = SOURCES_PER_PROCESS) -> int:
    """Sockets one agent process may hold: the open-file limit (or the ports connect()
    hands out from its addresses, were they fewer), less headroom."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    ports = connect_ports(*read_port_range())
    return max(1, min(soft, ports * sources_per_process) - FD_HEADROOM)


@dataclass(frozen=True)
class AgentShare:
    """One agent process: where it connects from and its connection target per step."""

    index: int
    sources: tuple[str, ...]
    schedule: tuple[int, ...]


def split_schedule(
    targets: list[int], per_process: int, source_pool: tuple[str, ...] | None = None
) -> list[AgentShare]:
    """Every step's target split evenly over as few processes as the largest target needs.

    Without a `source_pool` each process connects from eight 127.0.0.x addresses of its
    own; a load host of a fleet gives its own addresses, dealt out to its processes in turn
    (two processes may then share one, and with it that address's source ports).
    """
    processes = max(1, math.ceil(max(targets, default=0) / per_process))
    shares = []
    for index in range(processes):
        schedule = tuple(t // processes + (1 if index < t % processes else 0) for t in targets)
        if source_pool:
            count = min(SOURCES_PER_PROCESS, len(source_pool))
            first_source = index * count
            sources = tuple(
                source_pool[(first_source + k) % len(source_pool)] for k in range(count)
            )
        else:
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
    close: str = "orderly",
    python: str = sys.executable,
    hold_together: bool = True,
) -> list[str]:
    """The agent's command line; it stops by itself a margin after its schedule's end and
    closes its connections as `close` says (model.ramps.CLOSE_MODES).

    `processes` share `open_rate_per_s` evenly; `python` runs it (a load host's own).
    `hold_together`: it waits at each target until released (SIGUSR1), so every agent of
    the ramp holds the step at once (a bench --ws at 100,000 on a local fleet saw only 3-4
    of its 5 holds without: 8 agents on 4 hosts reached 60,000+ seconds apart, and their
    3 s holds no longer overlapped)."""
    rate = open_rate_per_s / processes
    opening_s = (max(share.schedule, default=0) / rate) if rate > 0 else 0.0
    time_limit_s = opening_s * OPENING_SLOWDOWN_ALLOWED + hold_s * len(share.schedule) + 30.0
    low, high = interval_s or (3.0, 6.0)
    return [
        python,
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
        "--close",
        close,
        *(["--hold-together"] if hold_together else []),
    ]


def parse_agent_line(line: str) -> dict[str, Any] | None:
    """One agent report line, or None for anything else it printed."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "opened" in record else None


def combine_agent_lines(latest: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """The newest line of every agent process as one: counts summed, reasons merged (and,
    for lines marked with a load host, each host's own counts under `hosts`)."""
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
    steps, phases, stopped_by = set(), set(), set()
    hosts: dict[str, dict[str, int]] = {}  # lines marked with their load host (a fleet's)
    for line in latest.values():
        if "host" in line:
            host = hosts.setdefault(line["host"], {"open": 0, "opened": 0, "failed": 0})
            host["open"] += int(line.get("open", 0))
            host["opened"] += int(line.get("opened", 0))
            host["failed"] += sum(int(n) for n in line.get("failed", {}).values())
        for key in ("open", "opened", "attempts", "messages_sent", "send_errors", "rss_bytes"):
            combined[key] += int(line.get(key, 0))
        combined["cpu_pct"] += float(line.get("cpu_pct", 0.0))
        for group in ("failed", "closed_by_server"):
            for reason, count in line.get(group, {}).items():
                combined[group][reason] = combined[group].get(reason, 0) + int(count)
        steps.add(line.get("step"))
        phases.add(line.get("phase"))
        if line.get("stopped_by"):
            stopped_by.add(line["stopped_by"])
    combined["step"] = min((s for s in steps if s is not None), default=-1)
    # the oldest of the newest lines: every agent was in its phase at this time (its clock)
    times = [float(line["t"]) for line in latest.values() if "t" in line]
    if times:
        combined["t"] = min(times)
    # an agent closing its connections (or done): the ramp's closing step has begun
    combined["closing"] = bool(phases & {"closing", "final"})
    # a hold is every agent holding the same step (hosts of a fleet may drift apart); every
    # agent `ready` at one step: the harness releases that step's hold (--hold-together)
    combined["phase"] = phases.pop() if len(phases) == 1 and len(steps) == 1 else "mixed"
    if hosts:
        combined["hosts"] = hosts
    # what ended the agents that ended ("time-limit" before "signal" before "schedule")
    combined["stopped_by"] = sorted(stopped_by, key=STOP_REASONS.index)
    return combined


class AgentOutputs:
    """The newest report line of each agent process, read from their raw output files as
    the processes write them (only complete lines; what an agent printed besides is skipped)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths
        self._offsets = [0] * len(paths)
        self.latest: dict[int, dict[str, Any]] = {}

    def read(self) -> dict[int, dict[str, Any]]:
        """Read what was added since the last call; the newest line of each process so far."""
        for index, path in enumerate(self.paths):
            with path.open("rb") as raw:
                raw.seek(self._offsets[index])
                chunk = raw.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offsets[index] += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                record = parse_agent_line(line)
                if record is not None:
                    self.latest[index] = record
        return dict(self.latest)

    def read_final(self) -> dict[int, dict[str, Any]]:
        """Every file read to its end (the agents' final lines: every message they sent)."""
        for index, path in enumerate(self.paths):
            for line in path.read_text(errors="replace").splitlines():
                record = parse_agent_line(line)
                if record is not None:
                    self.latest[index] = record
        return dict(self.latest)

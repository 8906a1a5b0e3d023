"""The closing step of a connection ramp: at its end the agents close every connection at
once (`ConnectionRamp.close`: orderly, or dropped by their processes' exit) and the runner
follows the server until it has closed them all. `closing_record` is what its telemetry
says of that step, above all its worst tick while it closed them (a close storm).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from harness.measured import measured_value

if TYPE_CHECKING:
    from harness.connections.agents import AgentGroup
    from harness.topology import Topology
    from model.ramps import ConnectionRamp

# The server must have closed every connection within CLOSING_TIMEOUT_S of the agents'
# closing, or CLOSING_S_PER_CONNECTION each if longer (else the record says how many it
# still held): two cores closing both ends of a million connections take longer than 30 s
# (harness/data/measured.toml). Its telemetry is read CLOSING_SETTLE_S past the last
# close, since a stall's lag is reported by the first tick after it, which may fall in the
# next telemetry line.
CLOSING_TIMEOUT_S = 30.0
CLOSING_S_PER_CONNECTION = measured_value("closing_s_per_connection", "s/connection")
CLOSING_SETTLE_S = 1.5
CLOSING_POLL_S = 0.25


def closing_timeout_s(connections: int) -> float:
    """How long a closing step of `connections` is followed at most."""
    return max(CLOSING_TIMEOUT_S, connections * CLOSING_S_PER_CONNECTION)


def first_closing_t(lines: dict[Any, dict[str, Any]]) -> float | None:
    """When the first agent began closing (its own `closing_t`); None before any did."""
    return min(
        (line["closing_t"] for line in lines.values() if line.get("closing_t")), default=None
    )


def follow_closing(ramp: ConnectionRamp, agents: AgentGroup, server: Topology) -> dict[str, Any]:
    """Follow the closing step the agents began: until the server holds no connection
    (at most closing_timeout_s) and CLOSING_SETTLE_S more; what it measured
    (`closing_record`)."""
    started = time.time()
    held = sum(int(line["open"]) for line in server.latest_telemetry().values())
    timeout_s = closing_timeout_s(held)
    # from the agents' own closing lines; an agent stopped by a signal before it could
    # print one (the watchdog) leaves the time the runner saw it
    closing_t = first_closing_t(agents.latest())
    if closing_t is None:
        closing_t = started
    closed_t: float | None = None
    while time.time() < closing_t + timeout_s:
        if server.process.poll() is not None:
            break
        latest = server.latest_telemetry()
        newest_t = min((line["t"] for line in latest.values()), default=0.0)
        if (
            closed_t is None
            and newest_t > closing_t
            and not any(line["open"] for line in latest.values())
        ):
            closed_t = newest_t
        if closed_t is not None and newest_t >= closed_t + CLOSING_SETTLE_S:
            break
        time.sleep(CLOSING_POLL_S)
    return closing_record(
        server.telemetry_lines(), close=ramp.close, closing_t=closing_t, end_t=time.time()
    )


def _by_pid(telemetry: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """Telemetry lines per server process, each in time order."""
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for line in sorted(telemetry, key=lambda line: line["t"]):
        by_pid.setdefault(int(line.get("pid", 0)), []).append(line)
    return by_pid


def _close_s(
    by_pid: dict[int, list[dict[str, Any]]], closing_t: float, inside: list[dict[str, Any]]
) -> float | None:
    """From the closing to the first line in which no process held a connection (each
    process's newest line then); None when not within the lines `inside` the step."""
    for t in sorted({line["t"] for line in inside}):
        newest = [
            [line for line in lines if closing_t < line["t"] <= t][-1:] for lines in by_pid.values()
        ]
        if all(newest) and not any(line[0]["open"] for line in newest):
            return round(t - closing_t, 3)
    return None


def closing_record(
    telemetry: list[dict[str, Any]],
    *,
    close: str,
    closing_t: float,
    end_t: float,
) -> dict[str, Any]:
    """What the server's telemetry says of a closing step that began at `closing_t` (the
    agents' clock, this machine's or a load host's) and was followed until `end_t`.

    `connections`: the server's open connections at the closing (its last line before);
    `open_after`: those it still held at `end_t`; `close_s`: from the closing to the
    first line in which no worker held any (None: not within the step); `tick_max_ms` and
    `tick_avg_ms`: its worst and mean tick lag in the lines after the closing (the first
    of them covers up to a second before it: a quiet hold); `gc_collections` and
    `gc_pause_ms`: what its collector did in the step (the counters' gain); `followed_s`:
    how long the step was followed."""
    by_pid = _by_pid(telemetry)
    connections = open_after = gc_collections = 0
    gc_pause_ms = 0.0
    inside: list[dict[str, Any]] = []
    for lines in by_pid.values():
        before = [line for line in lines if line["t"] <= closing_t]
        after = [line for line in lines if closing_t < line["t"] <= end_t]
        inside.extend(after)
        if before:
            connections += int(before[-1]["open"])
        last = after[-1] if after else (before[-1] if before else None)
        if last is not None:
            open_after += int(last["open"])
        if before and after:
            gc_collections += int(after[-1]["gc_collections"]) - int(before[-1]["gc_collections"])
            gc_pause_ms += float(after[-1]["gc_pause_ms"]) - float(before[-1]["gc_pause_ms"])
    return {
        "close": close,
        "connections": connections,
        "open_after": open_after,
        "close_s": _close_s(by_pid, closing_t, inside),
        "tick_max_ms": max((float(line["tick_max_ms"]) for line in inside), default=None),
        "tick_avg_ms": round(statistics.fmean(float(line["tick_avg_ms"]) for line in inside), 3)
        if inside
        else None,
        "gc_collections": gc_collections,
        "gc_pause_ms": round(gc_pause_ms, 3),
        "followed_s": round(end_t - closing_t, 3),
    }

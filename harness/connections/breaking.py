"""The breaking point of a connection ramp, judged one second at a time (`BreakWatch`),
and the memory reserve that ends any ramp before the host runs out (`memory_break`).

A second is bad when the worst tick exceeded BREAK_TICK_MS, when handshakes were
outstanding and none completed, or when failures (or server drops) over the trailing
BREAK_SECONDS reached FAILURE_SHARE of the attempts (or open connections), and at least
MIN_FAILURES, so one stray failure never breaks a run. BREAK_SECONDS bad seconds in a row
are the breaking point: the first of them names the connections open and why.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

BREAK_TICK_MS = 1000.0
BREAK_SECONDS = 5
FAILURE_SHARE = 0.01  # of the attempts (or open connections) in the trailing window
MIN_FAILURES = 10
# failure reasons that are an OS limit of the load side, and the limit each names
LIMIT_REASONS = ("too_many_open_files", "no_free_port")
LIMIT_NAMES = {"too_many_open_files": "open files", "no_free_port": "source ports"}
# Memory: a ramp ends (in either mode) once the host has less than this share of its
# memory available, at least MEMORY_RESERVE_MIN_BYTES: its breaking point is then the
# memory's, named with the figures, and the box never reaches the OOM killer.
MEMORY_RESERVE_SHARE = 0.05
MEMORY_RESERVE_MIN_BYTES = 1 << 30


@dataclass(frozen=True)
class RampSecond:
    """One second of the ramp: the agents' lines combined (drivers.agent.plan's
    combine_agent_lines), the server's telemetry merged over its workers."""

    t: float  # wall clock, when the runner read it
    agents: dict[str, Any]
    tick_max_ms: float
    messages: int


def total(counts: dict[str, int]) -> int:
    """The sum of a by-reason count."""
    return sum(counts.values())


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """By-reason counts gained from `before` to `after`, zeros left out."""
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


class BreakWatch:
    """The breaking point, judged one second at a time as the ramp reads them. The work
    per second is bounded by the trailing window, whatever the ramp's length: judging
    the whole list afresh at every poll would grow with the square of the ramp's seconds.

    Failures come in bursts while a step opens; the trailing window keeps a step's hold
    from hiding them.
    """

    def __init__(self) -> None:
        self._recent: deque[RampSecond] = deque()  # the trailing window, and the second before
        self._streak: list[tuple[RampSecond, str]] = []
        self.found: dict[str, Any] | None = None

    def add(self, now: RampSecond) -> dict[str, Any] | None:
        """Judge the next second; the breaking point once found (then always that one)."""
        if self.found is not None:
            return self.found
        before = self._recent[-1] if self._recent else None
        self._recent.append(now)
        while len(self._recent) > 1 and self._recent[1].t < now.t - BREAK_SECONDS:
            self._recent.popleft()  # keep the window's first second at its start
        if before is None:
            return None
        window = next(s for s in self._recent if s.t >= now.t - BREAK_SECONDS)
        reason = bad_second_reason(before, now, window)
        if not reason:
            self._streak = []
            return None
        self._streak.append((now, reason))
        if len(self._streak) >= BREAK_SECONDS:
            first, first_reason = self._streak[0]
            found = {"connections": first.agents["open"], "reason": first_reason, "t": first.t}
            limits = [LIMIT_NAMES[k] for k in LIMIT_REASONS if k in first_reason]
            self.found = {**found, "limit": limits[0]} if limits else found
        return self.found


def find_breaking_point(seconds: list[RampSecond]) -> dict[str, Any] | None:
    """The first run of BREAK_SECONDS bad seconds: where and why the server broke
    (BreakWatch over `seconds`, in order)."""
    watch = BreakWatch()
    for second in seconds:
        found = watch.add(second)
        if found is not None:
            return found
    return None


def bad_second_reason(before: RampSecond, now: RampSecond, window: RampSecond) -> str:
    """Why the second `now` is bad ("" when it is not); `before`: the second before it;
    `window`: the trailing window's first second."""
    agents, past = now.agents, window.agents
    pending = agents["attempts"] - agents["opened"] - total(agents["failed"])
    failed = delta(agents["failed"], past["failed"])
    dropped = delta(agents["closed_by_server"], past["closed_by_server"])
    attempts = agents["attempts"] - past["attempts"]
    if now.tick_max_ms > BREAK_TICK_MS:
        return f"tick max {now.tick_max_ms:.0f} ms > {BREAK_TICK_MS:.0f} ms"
    if pending > 0 and agents["opened"] == before.agents["opened"]:
        # handshakes under way and none completing: the server stopped accepting
        return f"handshakes stalled: {pending} pending, none completed"
    if total(failed) >= max(MIN_FAILURES, FAILURE_SHARE * attempts):
        return "connections failed: " + ", ".join(f"{k} {v}" for k, v in failed.items())
    if total(dropped) >= max(MIN_FAILURES, FAILURE_SHARE * agents["open"]):
        return "server dropped connections: " + ", ".join(f"{k} {v}" for k, v in dropped.items())
    return ""


def memory_reserve_bytes(total_bytes: int, reserve_gib: float | None = None) -> int:
    """The memory a connection ramp leaves the host: `reserve_gib` when given (the ramp's
    `memory_reserve_gib`), else MEMORY_RESERVE_SHARE of it, at least
    MEMORY_RESERVE_MIN_BYTES."""
    if reserve_gib is not None:
        return int(reserve_gib * 2**30)
    return max(MEMORY_RESERVE_MIN_BYTES, int(total_bytes * MEMORY_RESERVE_SHARE))


def memory_break(
    open_now: int, available_bytes: int, reserve_bytes: int, t: float | None = None
) -> dict[str, Any]:
    """The breaking point of a ramp that ran the host short of memory, at `t` (now when
    not given)."""
    return {
        "connections": open_now,
        "reason": f"memory: {available_bytes / 2**30:.2f} GiB available, under the"
        f" {reserve_bytes / 2**30:.2f} GiB the ramp leaves the host",
        "limit": "memory",
        "host_available_bytes": available_bytes,
        "t": time.time() if t is None else t,
    }

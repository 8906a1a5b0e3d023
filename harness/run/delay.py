"""The delay scenario's reading (HttpArena's `async`): how many requests a server holds in
flight while each still answers within HELD_P99_FACTOR × the delay at p99.

`/delay/{ms}` answers after `ms` of waiting on the server's own timer, so its CPU is not
what limits it: its concurrency model is. A closed-loop step at concurrency C keeps C
requests in flight; the server holds them when its p99 stays near `ms`. The figure is
the offered concurrency of the highest such step (`held_in_flight`), with no errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from model.results import Step
from servers import contract

HELD_P99_FACTOR = 2.0  # p99 ≤ 2 × ms: the request waited its ms, and at most as long again


def delay_ms_of(path: str) -> int | None:
    """The milliseconds of a `/delay/{ms}` path; None for any other path."""
    if not path.startswith(contract.ROUTE_DELAY_PREFIX):
        return None
    segment = path[len(contract.ROUTE_DELAY_PREFIX) :]
    return int(segment) if segment.isdigit() else None


def held_in_flight(
    steps: Sequence[Step], delay_ms: float, factor: float = HELD_P99_FACTOR
) -> dict[str, Any] | None:
    """The highest concurrency step with no errors whose p99 is at most `factor` ×
    `delay_ms`: its `concurrency` (requests held in flight), `p99_ms`, the `limit_ms` it was
    held to and its `req_s`; None when no step of a concurrency ramp held."""
    limit_ms = factor * delay_ms
    held = [
        step
        for step in steps
        if step.unit == "concurrency"
        and step.errors["total"] == 0
        and step.latency_ms.get("p99") is not None
        and step.latency_ms["p99"] <= limit_ms
    ]
    best = max(held, key=lambda step: step.offered, default=None)
    if best is None:
        return None
    return {
        "concurrency": int(best.offered),
        "p99_ms": best.latency_ms["p99"],
        "limit_ms": limit_ms,
        "req_s": best.achieved,
    }

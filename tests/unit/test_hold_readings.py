"""A connection ramp's hold as a Step (harness.connections.readings.hold_step): counts,
errors and the memory read at the hold's end, from hand-made agent lines and monitor rows
(a Monitor that never started: no window, no process)."""

from __future__ import annotations

from typing import Any

from harness.connections.breaking import RampSecond
from harness.connections.readings import hold_step
from harness.monitor import Monitor


def agents(open_: int, *, failed: dict[str, int], messages_sent: int, t: float) -> dict[str, Any]:
    return {
        "open": open_,
        "opened": open_ + 5,
        "attempts": open_ + 5 + sum(failed.values()),
        "failed": failed,
        "closed_by_server": {"1006": 5},
        "messages_sent": messages_sent,
        "rss_bytes": 50_000_000,
        "t": t,
    }


def test_a_hold_becomes_a_step_with_its_errors_and_the_memory_read_while_held() -> None:
    monitor = Monitor(dict)
    monitor.rows.extend(
        [
            {"t": 10.5, "server_cgroup_memory_bytes": 100, "mem_available_bytes": 9_000},
            {"t": 12.5, "server_cgroup_memory_bytes": 200, "kernel_slab_bytes": 7},
            {"t": 14.5, "server_cgroup_memory_bytes": 999},  # after the agents' last line
        ]
    )
    start = RampSecond(10.0, agents(1_000, failed={}, messages_sent=0, t=10.0), 5.0, 0)
    failed = {"too_many_open_files": 3}
    end = RampSecond(14.0, agents(1_000, failed=failed, messages_sent=400, t=13.0), 5.0, 200)
    step = hold_step(2_000.0, start, end, monitor=monitor, server=None, baseline_rss_bytes=None)  # type: ignore[arg-type]
    assert (step.offered, step.unit, step.achieved, step.replies) == (
        2_000.0,
        "conns",
        1_000,
        1_005,
    )
    assert step.errors == {"total": 8, "failed_too_many_open_files": 3, "closed_1006": 5}
    assert step.flags == ("limit_capped",)  # a failure on the load side's open files
    assert step.figures.errors_in_step == 3  # the drops were there at the hold's start
    assert step.figures.messages_out_per_s == 100.0 and step.figures.messages_in_per_s == 50.0
    # the last reading up to the agents' last line (13.0), not the window's end
    assert step.figures.cgroup_memory_bytes == 200
    assert step.figures.host_available_bytes == 9_000 and step.figures.kernel_slab_bytes == 7
    assert step.rss_max_bytes is None and step.figures.rss_per_connection_bytes is None

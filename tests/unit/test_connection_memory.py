"""Memory as a connection ramp's figure: where it went at the top step (server, agents,
kernel, host), the ramp's end when the host runs short, and a limit named at the
breaking point (harness.connections, harness.monitor)."""

from __future__ import annotations

import dataclasses

from harness.connections import (
    RampSecond,
    find_breaking_point,
    memory_break,
    memory_breakdown,
    memory_reserve_bytes,
)
from harness.monitor import parse_sockstat
from model.results import LATENCY_KEYS, Step
from model.step_figures import StepFigures

# /proc/net/sockstat on this box with ~200,000 sockets of a 100,000-connection ramp open
SOCKSTAT = """sockets: used 200418
TCP: inuse 200012 orphan 0 tw 14 alloc 200016 mem 83
UDP: inuse 2 mem 1
UDPLITE: inuse 0
RAW: inuse 0
FRAG: inuse 0 memory 0
"""

KB = 1024


def held(open_now: int, *, server_kb: float, agents_kb: float, slab_kb: float) -> Step:
    """A held step whose readings grow by the given KB per connection from an idle host."""
    rss = 40_000_000 + int(open_now * server_kb * KB)
    agents = 30_000_000 + int(open_now * agents_kb * KB)
    slab = 400_000_000 + int(open_now * slab_kb * KB)
    total = int(open_now * (server_kb + agents_kb + slab_kb) * KB)
    return Step(
        offered=open_now,
        unit="conns",
        achieved=float(open_now),
        replies=open_now,
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        rss_max_bytes=rss,
        figures=StepFigures(
            open=open_now,
            agent_rss_bytes=agents,
            kernel_slab_bytes=slab,
            host_available_bytes=20_000_000_000 - total,
            tcp_buffer_bytes=83 * 4096,
            cgroup_memory_bytes=rss + int(open_now * 3.5 * KB),
        ),
    )


IDLE = {
    "server_rss_bytes": 40_000_000,
    "server_cgroup_memory_bytes": 40_000_000,
    "kernel_slab_bytes": 400_000_000,
    "mem_available_bytes": 20_000_000_000,
}


def test_sockstat_tcp_line_is_read_as_numbers() -> None:
    assert parse_sockstat(SOCKSTAT) == {
        "inuse": 200012,
        "orphan": 0,
        "tw": 14,
        "alloc": 200016,
        "mem": 83,
    }
    assert parse_sockstat("sockets: used 3\n") == {}


def test_the_breakdown_is_the_top_step_with_each_share_per_connection() -> None:
    steps = [held(n, server_kb=9.0, agents_kb=2.6, slab_kb=9.3) for n in (20_000, 60_000, 100_000)]
    breakdown = memory_breakdown(steps, IDLE)
    assert breakdown is not None
    assert breakdown["connections"] == 100_000
    assert breakdown["server_rss_bytes"] == steps[-1].rss_max_bytes
    assert breakdown["agents_rss_bytes"] == steps[-1].figures.agent_rss_bytes
    assert breakdown["kernel_slab_growth_bytes"] == int(100_000 * 9.3 * KB)
    assert breakdown["host_used_growth_bytes"] == int(100_000 * (9.0 + 2.6 + 9.3) * KB)
    per = breakdown["kb_per_connection"]
    assert per["server_rss"] == 9.0
    assert per["server_cgroup"] == 12.5
    assert per["agents_rss"] == 2.6
    assert per["kernel_slab"] == 9.3
    assert per["host"] == 20.9


def test_no_held_step_no_breakdown_and_missing_readings_are_none() -> None:
    assert memory_breakdown([], IDLE) is None
    bare = held(10_000, server_kb=9.0, agents_kb=2.6, slab_kb=9.3)
    bare = dataclasses.replace(
        bare,
        figures=dataclasses.replace(
            bare.figures, kernel_slab_bytes=None, host_available_bytes=None
        ),
    )
    breakdown = memory_breakdown([bare], None)
    assert breakdown is not None
    assert breakdown["kernel_slab_growth_bytes"] is None
    assert breakdown["host_used_growth_bytes"] is None
    assert breakdown["kb_per_connection"]["server_rss"] is None  # one point, no slope


def test_the_reserve_is_a_share_of_the_host_but_never_under_a_gib() -> None:
    assert memory_reserve_bytes(25_276_194_816) == 1_263_809_740
    assert memory_reserve_bytes(4 << 30) == 1 << 30


def test_a_memory_break_names_the_limit_and_the_figures() -> None:
    found = memory_break(412_345, 1_100_000_000, 1_263_809_740)
    assert found["connections"] == 412_345
    assert found["limit"] == "memory"
    assert found["host_available_bytes"] == 1_100_000_000
    assert found["reason"].startswith("memory: 1.02 GiB available, under the 1.18 GiB")


def second(t: float, open_: int, failed: dict[str, int]) -> RampSecond:
    agents = {
        "open": open_,
        "opened": open_,
        "attempts": open_ + sum(failed.values()),
        "failed": failed,
        "closed_by_server": {},
    }
    return RampSecond(t, agents, 5.0, 0)


def test_a_break_on_an_os_limit_names_it() -> None:
    calm = [second(float(t), 1000 * t, {}) for t in range(5)]
    short = [second(5.0 + t, 5000, {"too_many_open_files": 50 * (t + 1)}) for t in range(6)]
    found = find_breaking_point(calm + short)
    assert found is not None
    assert found["limit"] == "open files"
    assert "too_many_open_files" in found["reason"]
    timeouts = [second(5.0 + t, 5000, {"handshake_timeout": 50 * (t + 1)}) for t in range(6)]
    plain = find_breaking_point(calm + timeouts)
    assert plain is not None and "limit" not in plain

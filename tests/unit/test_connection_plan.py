"""`harness plan-connections`' arithmetic (harness.connection_plan) on hosts built here:
processes, addresses, load hosts, memory, conntrack, time, and the refusal's one line."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.connection_plan import (
    GIB,
    KIB,
    SERVER_MEMORY,
    ConnectionHost,
    ConnectionPlan,
    conntrack_tracked,
    plan_connections,
    plan_frameworks,
    plan_refusal,
)
from model.errors import UserError

# This project's box: 2 CPUs, 23.5 GB, open files 20,000 (not raisable), ports 32768-60999,
# conntrack loaded but tracking nothing (a loopback connection took no entry)
THIS_BOX = ConnectionHost(
    hostname="vm",
    cpu_count=2,
    open_files=20_000,
    open_files_hard=20_000,
    port_range=(32768, 60999),
    somaxconn=4096,
    memory_total_bytes=25_276_194_816,
    memory_available_bytes=24_666_353_664,
    conntrack_max=262_144,
    conntrack_count=0,
    loopback_tracked=False,
)


def plan(
    connections: int, frameworks: list[str], host: ConnectionHost = THIS_BOX, **given: float
) -> ConnectionPlan:
    options: dict = {
        "open_rate_per_s": 200.0,
        "ramp_step": 1000,
        "ramp_hold_s": 5.0,
        "addresses_per_host": 4,
    }
    return plan_connections(connections, frameworks, host, **{**options, **given})


def test_a_million_needs_what_the_readme_worked_out() -> None:
    million = plan(1_000_000, ["node-http", "twisted", "aiohttp"])
    assert million.server_connections_per_process == 19_900  # 20,000 less its own 100
    assert million.agent_connections_per_process == 19_900
    node = million.frameworks[0]
    assert node.server_processes_min == 51 and node.server_workers == 56  # README: workers:56
    assert million.source_addresses == 71  # 1,000,000 / 14,116 even ports of 32768-60999
    assert million.fleet_hosts == 18  # 18 hosts × 4 addresses
    assert million.agent_processes == 18 * 3  # 55,556 per host over 19,900 each
    fleet = plan(1_000_000, ["node-http"], dataclasses.replace(THIS_BOX, port_range=(1024, 65535)))
    assert fleet.source_addresses == 32 and fleet.fleet_hosts == 8  # 32,256 even ports each
    assert million.agent_bytes == round(1_000_000 * 3.1 * KIB)
    assert million.kernel_bytes == round(1_000_000 * 8.3 * KIB)
    assert million.opening_s == 5_000  # 1,000,000 at 200/s
    assert million.ramp_steps == 1_000 and million.ramp_s == 5_000 + 1_000 * 5.0
    assert million.conntrack_entries == 1_000_000 and million.conntrack_tracked is False


def test_memory_is_each_servers_own_with_the_agents_and_the_kernel() -> None:
    million = plan(1_000_000, ["node-http", "twisted", "aiohttp"])
    by_name = {f.framework: f for f in million.frameworks}
    aiohttp = by_name["aiohttp"]
    # 14.2 KB per connection and 56 workers of ~40 MB each (6,586 MB at 300,000 on 56)
    assert aiohttp.server_bytes == pytest.approx(1_000_000 * 14.2 * KIB + 56 * 39.7e6, rel=0.01)
    for framework in million.frameworks:
        assert framework.memory_total_bytes == (
            framework.server_bytes + million.agent_bytes + million.kernel_bytes
        )
    assert by_name["node-http"].memory_fits  # ~19.9 GB of 22.9 GB available
    assert by_name["twisted"].memory_fits  # measured at 1,000,000 on 56 workers: 3.0 KB
    twisted = by_name["twisted"]  # and ~65 MB each worker besides
    assert twisted.server_bytes == pytest.approx(
        1_000_000 * 3.0 * KIB + 56 * (6733e6 - 1_000_000 * 3.0 * KIB) / 56, rel=0.01
    )
    assert not aiohttp.memory_fits


def test_a_plan_that_does_not_fit_names_the_limit_in_one_line() -> None:
    refusal = plan_refusal(plan(1_000_000, ["node-http", "tornado", "aiohttp"]))
    assert refusal is not None and "\n" not in refusal
    assert refusal == (
        "tornado: 1,000,000 connections need 29.2 GB of memory, this host has 23.0 GB "
        "available: memory; aiohttp: 1,000,000 connections need 26.5 GB of memory, this "
        "host has 23.0 GB available: memory"
    )
    assert plan_refusal(plan(1_000_000, ["node-http"])) is None


def test_conntrack_refuses_when_the_connections_would_be_tracked() -> None:
    tracking = dataclasses.replace(THIS_BOX, conntrack_count=40)
    assert conntrack_tracked(tracking) is True
    refusal = plan_refusal(plan(300_000, ["node-http"], tracking))
    assert refusal == (
        "300,000 connections need 300,000 conntrack entries, nf_conntrack_max is 262,144: conntrack"
    )
    assert plan_refusal(plan(262_144, ["node-http"], tracking)) is None  # exactly fits


def test_whether_the_connections_would_be_tracked() -> None:
    assert conntrack_tracked(THIS_BOX) is False  # a loopback connection took no entry
    assert conntrack_tracked(dataclasses.replace(THIS_BOX, conntrack_max=None)) is False
    taken = dataclasses.replace(THIS_BOX, loopback_tracked=True)
    assert conntrack_tracked(taken) is True
    unknown = dataclasses.replace(THIS_BOX, loopback_tracked=None)
    assert conntrack_tracked(unknown) is None  # nothing tells: counted as tracked
    assert plan_refusal(plan(300_000, ["node-http"], unknown)) is not None
    assert plan_refusal(plan(300_000, ["node-http"])) is None


def test_a_small_plan_needs_one_process_of_each_and_no_fleet() -> None:
    small = plan(15_000, ["aiohttp"])
    assert small.frameworks[0].server_processes_min == small.frameworks[0].server_workers == 1
    assert small.agent_processes == 1 and small.source_addresses == 2 and small.fleet_hosts == 1
    assert plan_refusal(small) is None


def test_the_ramp_ends_at_the_connections_asked_for() -> None:
    odd = plan(2_500, ["aiohttp"], ramp_step=1_000, open_rate_per_s=500.0)
    assert odd.ramp_steps == 3  # 500, 1,500, 2,500
    assert odd.ramp_s == pytest.approx(2_500 / 500 + 3 * 5.0)
    assert plan(500, ["aiohttp"], ramp_step=10_000).ramp_step == 500


def test_the_open_files_limit_and_the_port_range_set_the_counts() -> None:
    narrow = dataclasses.replace(THIS_BOX, open_files=1_100, port_range=(50000, 50999))
    counts = plan(10_000, ["node-http"], narrow, addresses_per_host=2)
    assert counts.server_connections_per_process == 1_000
    assert counts.frameworks[0].server_processes_min == 10
    assert counts.source_addresses == 20 and counts.fleet_hosts == 10  # 500 even ports each
    # an agent with one address of 500 even ports holds 400 (as harness.fleet.agents reckons)
    lone = plan(10_000, ["node-http"], narrow, addresses_per_host=1)
    assert lone.agent_connections_per_process == 400 and lone.fleet_hosts == 20
    assert lone.agent_processes == 20 * 2  # 500 per host over 400 each
    with pytest.raises(UserError, match=r"open files$"):
        plan(10, ["node-http"], dataclasses.replace(THIS_BOX, open_files=100))


def test_more_memory_than_available_is_refused_for_any_server() -> None:
    small_box = dataclasses.replace(THIS_BOX, memory_available_bytes=1 * GIB)
    refusal = plan_refusal(plan(100_000, ["eventlet"], small_box))
    assert refusal is not None and refusal.startswith("eventlet: 100,000 connections need ")
    assert refusal.endswith("this host has 1.0 GB available: memory")


def test_unknown_and_unmeasured_frameworks_name_the_valid_ones() -> None:
    assert plan_frameworks("all") == list(SERVER_MEMORY)
    assert plan_frameworks("aiohttp, node-http,aiohttp") == ["aiohttp", "node-http"]
    valid = "choose from all, node-http, node-express, twisted, aiohttp, tornado, gevent, eventlet"
    with pytest.raises(UserError, match=f"^unknown framework nope: {valid}$"):
        plan_frameworks("aiohttp,nope", registered=["aiohttp", "nginx"])
    with pytest.raises(UserError, match=f"^no measured memory .* for nginx: {valid}$"):
        plan_frameworks("nginx", registered=["aiohttp", "nginx"])
    with pytest.raises(UserError, match=r"^unknown framework ''"):
        plan_frameworks("")


def test_the_plan_as_json() -> None:
    record = json.loads(json.dumps(plan(1_000_000, ["node-http"]).record()))
    assert record["host"]["port_range"] == [32768, 60999]
    assert record["ports_per_address"] == 14_116  # the even half of 28,232
    assert record["frameworks"][0]["server_workers"] == 56
    assert record["conntrack_fits"] is True and record["refusal"] is None


def test_a_host_with_impossible_facts_is_refused() -> None:
    with pytest.raises(ValueError, match="port_range"):
        dataclasses.replace(THIS_BOX, port_range=(61000, 32768))
    with pytest.raises(ValueError, match="open_files"):
        dataclasses.replace(THIS_BOX, open_files=0)

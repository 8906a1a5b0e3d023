"""`harness plan-connections` as a user runs it: this host's facts read, the plan printed,
a refusal in one line with exit status 1. Only the CLI runs: no server, no load."""

from __future__ import annotations

import json
import resource

from harness.connection_plan import SERVER_MEMORY
from tests.helpers import harness


def test_a_plan_that_fits_is_printed_with_exit_0() -> None:
    result = harness("plan-connections", "20000", "--frameworks", "node-http,aiohttp")
    assert result.returncode == 0, result.stderr
    assert "20,000 idle WebSocket connections on " in result.stdout
    for row in ("server processes", "agent processes", "source addresses", "conntrack", "time"):
        assert row in result.stdout
    assert "node-http" in result.stdout and "aiohttp" in result.stdout


def test_the_plan_as_json_reads_this_hosts_limits() -> None:
    result = harness(
        "plan-connections", "50000", "--frameworks", "all", "--open-rate", "500", "--json"
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert plan["host"]["open_files"] == soft
    assert plan["server_connections_per_process"] == soft - 100
    assert [f["framework"] for f in plan["frameworks"]] == list(SERVER_MEMORY)
    assert plan["opening_s"] == 100.0  # 50,000 at 500/s
    assert plan["refusal"] is None


def test_the_ramps_open_rate_is_the_ws_ramp_profiles_by_default() -> None:
    result = harness("plan-connections", "1000", "--frameworks", "twisted", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["open_rate_per_s"] == 200  # harness/profiles/ws-ramp.toml
    assert plan["ramp_step"] == 1000 and plan["ramp_hold_s"] == 5


def test_a_plan_past_this_hosts_memory_is_refused_naming_the_limit() -> None:
    result = harness("plan-connections", "100000000", "--frameworks", "eventlet")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("harness: error: ")  # conntrack first where it tracks them
    assert "eventlet: 100,000,000 connections need " in line
    assert line.endswith(" available: memory")
    assert "Traceback" not in result.stderr


def test_an_unknown_framework_names_the_valid_ones() -> None:
    result = harness("plan-connections", "1000", "--frameworks", "nope")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"harness: error: unknown framework nope: choose from all, {', '.join(SERVER_MEMORY)}"
    )
    result = harness("plan-connections", "1000", "--frameworks", "nginx")
    assert result.returncode == 1
    assert "no measured memory per idle WebSocket connection for nginx" in result.stderr

"""The WebSocket agent against real servers, and the connection-ramp pieces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.server_process import start_server
from model.results import read_run
from tests.helpers import harness, require_framework


def run_agent(port: int, *args: str, timeout_s: float = 60) -> list[dict]:
    command = [sys.executable, "-m", "drivers.agent", "--port", str(port), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_agent_opens_holds_sends_and_closes_cleanly() -> None:
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        lines = run_agent(
            server.port,
            "--schedule",
            "100,200",
            "--hold",
            "2",
            "--open-rate",
            "1000",
            "--interval",
            "0.2,0.4",
            "--payload",
            "short",
            "--source",
            "127.0.0.2",
            "--time-limit",
            "30",
        )
        final = lines[-1]
        assert final["phase"] == "final" and final["stopped_by"] == "schedule"
        assert final["opened"] == 200 and final["failed"] == {}
        assert final["closed_by_server"] == {}
        assert final["messages_sent"] > 200  # ~4 s of 200 connections every 0.2–0.4 s
        assert {(line["step"], line["phase"]) for line in lines} >= {(0, "holding"), (1, "holding")}
        assert final["rss_bytes"] > 0
        telemetry = server.wait_telemetry(
            lambda t: t["messages"] >= final["messages_sent"] and t["open"] == 0, timeout_s=5
        )
        assert telemetry, server.latest_telemetry()  # every message arrived, all closed
        assert telemetry["bad"] == 0


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--origin", "elsewhere"], "status_403"),
        (["--subprotocol", "other"], "status_400"),
    ],
)
def test_agent_counts_refused_handshakes_by_reason(args: list[str], reason: str) -> None:
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        lines = run_agent(
            server.port, "--schedule", "20", "--hold", "0.5", *args, "--time-limit", "20"
        )
    assert lines[-1]["failed"] == {reason: 20}
    assert lines[-1]["opened"] == 0


def test_agent_counts_refused_connections_and_stops_by_itself() -> None:
    with __import__("socket").socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here
    lines = run_agent(port, "--schedule", "10", "--hold", "0.5", "--time-limit", "10")
    assert lines[-1]["failed"] == {"refused": 10}


def test_an_agent_behind_its_schedule_stops_at_its_time_limit_and_says_so() -> None:
    """300 connections at 50/s cannot open in 2 s: the agent stops by itself then, its last
    lines saying why (the harness reports the ramp cut short from them)."""
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        lines = run_agent(
            server.port, "--schedule", "300", "--hold", "5", "--open-rate", "50",
            "--time-limit", "2", timeout_s=30,
        )  # fmt: skip
    final = lines[-1]
    assert final["phase"] == "final" and final["stopped_by"] == "time-limit"
    assert 0 < final["opened"] < 300
    assert not any("stopped_by" in line for line in lines if line["phase"] == "opening")


def test_connection_ramp_end_to_end(tmp_path: Path) -> None:
    require_framework("aiohttp")
    result = harness(
        "compare",
        "--frameworks",
        "aiohttp",
        "--profile",
        "smoke",
        "--scenario",
        "ws-short",
        # messages leave every 3–6 s and the server's counter is read from its once-a-second
        # telemetry: a 2 s hold can end before a new line shows the step's messages
        "--set",
        "connection_ramp.hold_s=4",
        "--out",
        str(tmp_path),
        timeout_s=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    run = read_run(next(tmp_path.iterdir()))
    [case] = run.cases
    assert case.status == "ok" and case.driver == "agent"
    assert [s.offered for s in case.steps] == [50, 100]
    assert [s.achieved for s in case.steps] == [50, 100]
    assert all(s.unit == "conns" and s.errors["total"] == 0 for s in case.steps)
    assert case.summary.peak == 100
    assert case.summary.breaking_point is None
    assert case.summary.limits["agent_processes"] == 1
    assert case.steps[-1].extra["messages_in_per_s"] > 0
    assert case.steps[-1].tick_ms["max"] is not None


def test_websocket_messages_are_reconciled_with_the_file_sink(tmp_path: Path) -> None:
    require_framework("aiohttp")
    result = harness(
        "compare",
        "--frameworks",
        "aiohttp",
        "--profile",
        "smoke",
        "--scenario",
        "ws-short",
        "--sink",
        "file",
        "--set",
        "connection_ramp.hold_s=4",
        "--out",
        str(tmp_path),
        timeout_s=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [case] = read_run(next(tmp_path.iterdir())).cases
    assert case.reconcile is not None
    assert case.reconcile["sent"] > 0
    assert case.reconcile == {
        "sent": case.reconcile["sent"],
        "stored": case.reconcile["sent"],
        "lost": 0,
        "duplicates": 0,
        "unparseable": 0,
    }


# A stress ramp run to its breaking point (~25 s): the breaking-point rules are covered
# without a process by tests/unit/test_agent_plan.py; this names the open-file limit.
@pytest.mark.slow
def test_a_limit_not_the_server_is_named_when_it_caps_a_stress_ramp(tmp_path: Path) -> None:
    """Under a real open-file limit of 400 the server stops accepting near 400 connections."""
    import shutil

    require_framework("aiohttp")
    command = [
        shutil.which("prlimit") or "prlimit",
        "--nofile=400:400",
        shutil.which("harness") or "harness",
        "compare",
        "--frameworks",
        "aiohttp",
        "--profile",
        "smoke",
        "--scenario",
        "ws-idle",
        "--mode",
        "stress",
        "--connections",
        "800",
        "--set",
        "connection_ramp.step=100",
        "--set",
        "connection_ramp.start=100",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    [case] = read_run(next(tmp_path.iterdir())).cases
    breaking = case.summary.breaking_point
    assert breaking is not None, case.steps
    assert 250 <= breaking["connections"] <= 400
    assert "open-file limit" in breaking["capped_by"]
    assert case.summary.limits["server_sockets_max"] == 300
    assert "use --process-model workers:N" in case.summary.limit_note
    assert len(case.steps) < 8  # the stress ramp ended at the breaking point

"""The WebSocket agent against real servers, and the connection-ramp pieces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drivers.agent.client import text_frame
from drivers.agent.payloads import PAYLOADS
from drivers.agent.plan import combine_agent_lines, split_schedule
from harness.connections import _Second, find_breaking_point
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
        assert final["phase"] == "final"
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


def test_text_frames_are_masked_and_sized() -> None:
    short = text_frame(PAYLOADS["short"])
    assert short[0] == 0x81 and short[1] == 0x80 | len(PAYLOADS["short"])
    mask, masked = short[2:6], short[6:]
    assert bytes(b ^ mask[i % 4] for i, b in enumerate(masked)) == PAYLOADS["short"]
    long = text_frame(PAYLOADS["long"])
    assert long[1] == 0x80 | 126
    assert 6900 < len(PAYLOADS["long"]) < 7100
    assert json.loads(PAYLOADS["long"])["testKeyValue0"] == "veryVeryLongDataValue"


def test_connections_split_over_processes_and_source_addresses() -> None:
    shares = split_schedule([10_000, 30_000, 45_000], per_process=19_900)
    assert len(shares) == 3
    assert shares[0].sources[0] == "127.0.0.2" and len(shares[0].sources) == 8
    all_sources = [source for share in shares for source in share.sources]
    assert len(set(all_sources)) == len(all_sources) == 24  # no address shared
    for step, target in enumerate([10_000, 30_000, 45_000]):
        assert sum(s.schedule[step] for s in shares) == target
    assert max(s.schedule[-1] for s in shares) <= 19_900


def test_agent_lines_combine() -> None:
    lines = {
        0: {
            "open": 10,
            "opened": 12,
            "attempts": 12,
            "failed": {"refused": 2},
            "step": 1,
            "phase": "holding",
            "closed_by_server": {},
            "messages_sent": 5,
            "cpu_pct": 3.0,
        },
        1: {
            "open": 9,
            "opened": 9,
            "attempts": 10,
            "failed": {"refused": 1, "timeout": 1},
            "step": 1,
            "phase": "holding",
            "closed_by_server": {"1001": 1},
            "messages_sent": 4,
        },
    }
    combined = combine_agent_lines(lines)
    assert combined["open"] == 19 and combined["messages_sent"] == 9
    assert combined["failed"] == {"refused": 3, "timeout": 1}
    assert combined["closed_by_server"] == {"1001": 1}
    assert (combined["step"], combined["phase"]) == (1, "holding")


def second(
    t: float, open_: int, tick: float = 5.0, failed: int = 0, attempts: int | None = None
) -> _Second:
    agents = {
        "open": open_,
        "opened": open_,
        "attempts": open_ + failed if attempts is None else attempts,
        "failed": {"timeout": failed} if failed else {},
        "closed_by_server": {},
    }
    return _Second(t, agents, tick, 0)


def test_breaking_point_needs_five_bad_seconds_in_a_row() -> None:
    calm = [second(t, 1000 * t) for t in range(5)]
    blip = [second(5, 5000, tick=1500), second(6, 6000)]
    lagging = [second(t, 1000 * t, tick=2000) for t in range(7, 13)]
    assert find_breaking_point(calm + blip) is None
    broken = find_breaking_point(calm + blip + lagging)
    assert broken == {"connections": 7000, "reason": "tick max 2000 ms > 1000 ms", "t": 7}
    stray = [second(t, 1000 * t, failed=1 if t > 3 else 0) for t in range(1, 12)]
    assert find_breaking_point(stray) is None  # one failure never breaks a run
    # a burst while each step opens, none during the holds: the window keeps it in view
    bursts = [second(t, 100, failed=500 * (t // 4 + 1)) for t in range(1, 12)]
    assert find_breaking_point(bursts)["reason"].startswith("connections failed: timeout")
    # the server stops accepting: attempts outstanding, none completing, no failure yet
    stalled = [second(t, 19_994, attempts=19_994 + 100 * t) for t in range(1, 8)]
    broken = find_breaking_point(stalled)
    assert broken["connections"] == 19_994
    assert broken["reason"] == "handshakes stalled: 200 pending, none completed"
    opening = [second(t, 1000 * t, attempts=1000 * t + 50) for t in range(1, 8)]
    assert find_breaking_point(opening) is None  # handshakes in flight, but completing


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
    assert case.summary["peak"] == 100
    assert case.summary["breaking_point"] is None
    assert case.summary["limits"]["agent_processes"] == 1
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
    }


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
    breaking = case.summary["breaking_point"]
    assert breaking is not None, case.steps
    assert 250 <= breaking["connections"] <= 400
    assert "open-file limit" in breaking["capped_by"]
    assert case.summary["limits"]["server_sockets_max"] == 300
    assert "use --process-model workers:N" in case.summary["limit_note"]
    assert len(case.steps) < 8  # the stress ramp ended at the breaking point

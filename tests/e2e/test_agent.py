"""The WebSocket agent against real servers, and the connection-ramp pieces."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from drivers.agent.plan import AgentShare, agent_command
from harness.connections import LocalAgents, run_connection_ramp
from harness.monitor import Monitor
from harness.server_process import start_server
from harness.topology import ProcessModel, Topology
from model.ramps import ConnectionRamp
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
        "--no-verify",  # the ramp is checked here; the WebSocket rules: test_conformance
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
    assert case.steps[-1].figures.messages_in_per_s > 0
    assert case.steps[-1].tick_ms["max"] is not None
    # memory at the top step: the server's, the agents', the kernel's and the host's
    breakdown = case.summary.memory_breakdown
    assert breakdown is not None and breakdown["connections"] == 100
    assert breakdown["server_rss_bytes"] == case.steps[-1].rss_max_bytes > 0
    assert breakdown["agents_rss_bytes"] == case.steps[-1].figures.agent_rss_bytes > 0
    assert breakdown["kernel_slab_bytes"] > 0 and breakdown["host_available_bytes"] > 0
    assert breakdown["kernel_slab_growth_bytes"] is not None
    assert set(breakdown["kb_per_connection"]) == {
        "server_rss", "server_cgroup", "agents_rss", "kernel_slab", "host",
    }  # fmt: skip
    assert all(s.figures.host_available_bytes is not None for s in case.steps)
    # the top step's window ends where the agents began closing, not after the closing
    # (it once ran to the agents' exit, and read the closing's stall as the hold's tick)
    case_dir = next(
        path
        for path in next(tmp_path.iterdir()).iterdir()
        if path.is_dir() and path.name.startswith("aiohttp")
    )
    lines = [
        json.loads(line)
        for raw in (case_dir / "ramp" / "raw").rglob("*.txt")
        for line in raw.read_text().splitlines()
        if line.startswith("{")
    ]
    closing_t = min(line["closing_t"] for line in lines if line.get("closing_t"))
    with (case_dir / "ramp" / "monitor.csv").open() as monitor:
        top_step_t = [float(row["t"]) for row in csv.DictReader(monitor) if row["step"] == "1"]
    assert top_step_t and max(top_step_t) <= closing_t + 2.0, (max(top_step_t), closing_t)


def test_a_ramp_ends_where_the_host_runs_short_of_memory(tmp_path: Path) -> None:
    """A reserve larger than this host's memory: the ramp ends at its first reading, in
    load mode too, before any step was held — the case fails naming the memory, and its
    breaking point is the memory's, with the figures."""
    require_framework("aiohttp")
    result = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", "--scenario", "ws-idle",
        "--connections", "2000", "--set", "connection_ramp.start=200",
        "--set", "connection_ramp.step=200", "--set", "connection_ramp.open_rate_per_s=100",
        "--set", "connection_ramp.memory_reserve_gib=100000", "--out", str(tmp_path),
        timeout_s=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "ran short of memory" in result.stdout
    [case] = read_run(next(tmp_path.iterdir())).cases
    assert case.status == "failed" and "ran short of memory" in case.error
    breaking = case.summary.breaking_point
    assert breaking is not None and breaking["limit"] == "memory", case.summary
    assert breaking["reason"].startswith("memory: ") and "100000.00 GiB" in breaking["reason"]
    assert breaking["host_available_bytes"] > 0
    assert breaking["connections"] < 2000
    assert case.steps == ()


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
        "--no-verify",  # the ramp is checked here; the WebSocket rules: test_conformance
        # one step of 100 connections: what is reconciled is the messages, not the ramp
        "--set",
        "connection_ramp.start=100",
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


def _read_until(
    process: subprocess.Popen, wanted: Callable[[dict], bool], lines: list[dict]
) -> dict:
    """Read the agent's lines (into `lines`) until one is `wanted`; that line."""
    assert process.stdout is not None
    for raw in process.stdout:
        lines.append(json.loads(raw))
        if wanted(lines[-1]):
            return lines[-1]
    raise AssertionError(f"the agent ended before the line wanted: {lines[-3:]}")


def test_an_agent_holding_together_waits_at_each_target_until_released() -> None:
    """--hold-together: `ready` at each target, no hold until SIGUSR1; then the hold, the
    next step, and at the end its schedule as the reason it stopped."""
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        command = [
            sys.executable, "-m", "drivers.agent", "--port", str(server.port),
            "--schedule", "20,40", "--hold", "0.5", "--open-rate", "1000",
            "--source", "127.0.0.2", "--time-limit", "30", "--hold-together",
        ]  # fmt: skip
        lines: list[dict] = []
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as agent:
            try:
                ready = _read_until(agent, lambda line: line["phase"] == "ready", lines)
                assert (ready["step"], ready["open"]) == (0, 20)
                for _ in range(2):  # two once-a-second lines: still waiting, no hold
                    waiting = _read_until(agent, lambda line: True, lines)
                    assert (waiting["step"], waiting["phase"]) == (0, "ready")
                agent.send_signal(signal.SIGUSR1)
                _read_until(agent, lambda line: line["phase"] == "holding", lines)
                ready = _read_until(agent, lambda line: line["phase"] == "ready", lines)
                assert (ready["step"], ready["open"]) == (1, 40)
                agent.send_signal(signal.SIGUSR1)
                final = _read_until(agent, lambda line: line["phase"] == "final", lines)
            finally:
                agent.kill()
    assert final["stopped_by"] == "schedule" and final["opened"] == 40
    phases = [(line["step"], line["phase"]) for line in lines]
    assert phases.index((0, "holding")) > phases.index((0, "ready"))
    assert phases.index((1, "holding")) > phases.index((1, "ready"))


def test_an_agent_stopped_while_ready_never_holds() -> None:
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        command = [
            sys.executable, "-m", "drivers.agent", "--port", str(server.port),
            "--schedule", "10", "--hold", "5", "--source", "127.0.0.2",
            "--time-limit", "30", "--hold-together",
        ]  # fmt: skip
        lines: list[dict] = []
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as agent:
            try:
                _read_until(agent, lambda line: line["phase"] == "ready", lines)
                agent.send_signal(signal.SIGTERM)
                final = _read_until(agent, lambda line: line["phase"] == "final", lines)
            finally:
                agent.kill()
    assert final["stopped_by"] == "signal" and final["opened"] == 10
    assert "holding" not in {line["phase"] for line in lines}


@pytest.mark.parametrize("together", [True, False], ids=["together", "apart"])
def test_agents_reaching_their_targets_apart_still_hold_every_step_together(
    tmp_path: Path, together: bool
) -> None:
    """Two agents at 400/s and 20/s: the fast one reaches each target seconds before the
    slow one (as a fleet's hosts do at 60,000+). Holding together, the runner sees both
    steps held by both; without it, the holds never overlap and it sees none — the branch
    that shows this test can fail."""
    require_framework("aiohttp")
    ramp = ConnectionRamp(start=100, target=200, step=100, hold_s=1.5, open_rate_per_s=420)
    with start_server("aiohttp") as server:
        topology = Topology(ProcessModel("single"), [server], instance_cpus=[None])
        commands = [
            agent_command(
                AgentShare(index, (f"127.0.0.{2 + index}",), (50, 100)),
                host=server.host, port=server.port, path="/ws", hold_s=ramp.hold_s,
                open_rate_per_s=rate, payload=None, interval_s=None, processes=1,
                hold_together=together,
            )
            for index, rate in enumerate((400.0, 20.0))
        ]  # fmt: skip
        paths = [tmp_path / f"agent-{index}.txt" for index in range(2)]
        agents = LocalAgents(commands, paths, {"agent_processes": 2}, None)
        monitor = Monitor(server.latest_telemetry)
        monitor.start(topology.pids)
        try:
            result = run_connection_ramp(
                ramp=ramp, agents=agents, server=topology, monitor=monitor,
                baseline_rss_bytes=None, on_step=lambda index, offered: None,
                on_step_done=lambda step: None,
            )  # fmt: skip
        finally:
            monitor.stop()
    if together:
        assert [(s.offered, s.figures.open) for s in result.steps] == [(100, 100), (200, 200)]
        assert all(s.figures.hold_s >= 0.5 for s in result.steps), result.steps
        assert result.cut_short is None
    else:
        assert len(result.steps) < 2 and result.cut_short is not None

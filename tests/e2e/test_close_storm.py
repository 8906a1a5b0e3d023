"""Close storms: every connection of a ramp closed at once, in order by
the client or dropped with its process, against each Python server.

Behaviour only — the closing step is recorded, every connection closed, the server serves
on. How long a storm stalls a loop is a figure a run reports (`harness compare --profile
ws-close-storm`), not something a test on a shared machine can time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from harness.server_process import start_server
from model.ramps import CLOSE_MODES
from model.results import read_run
from servers import contract
from tests.helpers import (
    harness,
    raw_ws_close_code,
    raw_ws_connect,
    require_framework,
    ws_frame,
)

PYTHON_SERVERS = ("gevent", "eventlet", "tornado", "twisted", "aiohttp")
STORM_CONNECTIONS = 1000


# The closing step is the harness's record (the agents' close, the server's telemetry):
# in the default run one compare in `drop` mode (the harder storm) of two servers, a
# greenlet one and an asyncio one (~15 s); the five in both modes in the slow run. Every
# server's own storm is in the default run below (test_a_server_serves_on_after_a_close_storm).
@pytest.mark.parametrize(
    ("close", "servers"),
    [
        pytest.param("drop", ("gevent", "aiohttp"), id="drop-two"),
        *(pytest.param(m, PYTHON_SERVERS, id=m, marks=pytest.mark.slow) for m in CLOSE_MODES),
    ],
)
def test_the_closing_step_is_recorded_for_every_python_server(
    tmp_path: Path, close: str, servers: tuple[str, ...]
) -> None:
    """One run of the servers: each case's summary has its closing step, every connection
    closed within it, with the server's tick max."""
    for name in servers:
        require_framework(name)
    result = harness(
        "compare",
        "--frameworks",
        ",".join(servers),
        "--profile",
        "ws-close-storm",
        "--set",
        f"ramp.start={STORM_CONNECTIONS}",
        "--set",
        f"ramp.target={STORM_CONNECTIONS}",
        "--set",
        "ramp.hold_s=1",
        "--set",
        "ramp.open_rate_per_s=2000",
        "--set",
        f"ramp.close={close}",
        "--no-verify",  # the closing step is what is checked; verify: test_conformance
        "--out",
        str(tmp_path),
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "close storm" in result.stdout  # the table, printed after the summary
    run = read_run(next(tmp_path.iterdir()))
    assert [case.framework for case in run.cases] == list(servers)
    for case in run.cases:
        assert case.status == "ok", (case.framework, case.error)
        assert [step.achieved for step in case.steps] == [STORM_CONNECTIONS]
        closing = case.summary.closing
        assert closing is not None, case.framework
        assert closing["close"] == close
        assert closing["connections"] == STORM_CONNECTIONS, (case.framework, closing)
        assert closing["open_after"] == 0, (case.framework, closing)  # all closed in the step
        assert closing["close_s"] is not None and closing["close_s"] >= 0, closing
        assert closing["tick_max_ms"] is not None and closing["tick_max_ms"] >= 0, closing
        # the agents' own closing is not the server closing them: no step error from it
        assert case.summary.errors_total == 0, (case.framework, case.steps[0].errors)


def run_agent(port: int, connections: int, close: str) -> list[dict]:
    """One agent process: open `connections`, hold a moment, close them all at once."""
    command = [
        sys.executable,
        "-m",
        "drivers.agent",
        "--port",
        str(port),
        "--schedule",
        str(connections),
        "--hold",
        "1",
        "--open-rate",
        "2000",
        "--source",
        ",".join(f"127.0.0.{host}" for host in range(2, 10)),
        "--time-limit",
        "60",
        "--close",
        close,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("close", CLOSE_MODES)
@pytest.mark.parametrize("name", PYTHON_SERVERS)
def test_a_server_serves_on_after_a_close_storm(name: str, close: str) -> None:
    """After STORM_CONNECTIONS closed at once the server holds none, answers HTTP and
    takes new WebSockets (whose messages it judges as before)."""
    require_framework(name)
    with start_server(name) as server:
        lines = run_agent(server.port, STORM_CONNECTIONS, close)
        closing, final = lines[-2], lines[-1]
        assert closing["phase"] == "closing" and closing["open"] == STORM_CONNECTIONS
        assert closing["closing_t"] is not None and closing["close"] == close
        assert final["phase"] == "final" and final["failed"] == {}
        assert final["closed_by_server"] == {}
        closed = server.wait_telemetry(
            lambda t: t["t"] > closing["closing_t"] and t["open"] == 0, timeout_s=20
        )
        assert closed is not None, server.latest_telemetry()
        counter = httpx.get(f"http://127.0.0.1:{server.port}/counter", timeout=5.0).json()
        assert counter["max_open"] >= STORM_CONNECTIONS
        with raw_ws_connect(server.port) as sock:  # a new WebSocket, judged as ever
            sock.sendall(ws_frame(0x1, b"not json"))
            assert raw_ws_close_code(sock) == contract.WS_CLOSE_INVALID_PAYLOAD

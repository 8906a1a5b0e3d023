"""What the wire cannot show, on every registered server: telemetry lines, counters as
telemetry and `/counter` see them, SIGTERM, --workers and option errors.

The wire contract itself (routes, headers, refusals, WebSocket closes) is checked by
harness/verify/'s checks in tests/e2e/test_conformance.py.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from harness.server_process import ServerProcess, start_server
from harness.verify import LOG_METHODS
from servers import FRAMEWORKS, contract
from tests.helpers import (
    assert_still_serving,
    one_per_runtime,
    require_framework,
    servers_serving,
)


# telemetry, tick lag and workers are the runtime's (eventlet's are gevent's green code,
# node-express's node-http's): -m slow runs those too
@pytest.fixture(params=one_per_runtime(list(FRAMEWORKS)), scope="module")
def framework(request: pytest.FixtureRequest) -> str:
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module")
def server(framework: str) -> Iterator[ServerProcess]:
    """One running server per framework, shared by the module's tests."""
    process = start_server(framework)
    yield process
    status = process.stop()
    assert status == 0, f"{framework} exited {status}: {process.stderr_tail()}"


def require_route(server: ServerProcess, route: str) -> None:
    if not FRAMEWORKS[server.framework].serves(route):
        pytest.skip(f"{server.framework} does not serve {route}")


def ws_connect(server: ServerProcess) -> ClientConnection:
    return connect(
        f"ws://127.0.0.1:{server.port}{contract.ROUTE_WEBSOCKET}",
        origin=contract.WS_ORIGIN,  # type: ignore[arg-type]
        subprotocols=[contract.WS_SUBPROTOCOL],  # type: ignore[list-item]
        max_size=None,
        compression=None,
        open_timeout=5,
        proxy=None,
    )


def latest(server: ServerProcess, field: str) -> int:
    return max(r[field] for r in server.latest_telemetry().values())


# -- telemetry -------------------------------------------------------------------------------
def test_first_telemetry_line_means_listening(server: ServerProcess) -> None:
    first = server.telemetry_lines()[0]
    assert first["port"] == server.port > 0
    assert first["requests"] == 0
    assert_still_serving(server)


def test_telemetry_lines_have_every_field_once_a_second(server: ServerProcess) -> None:
    first_count = len(server.telemetry_lines())
    assert server.wait_telemetry(lambda r: True, timeout_s=1)
    time.sleep(3.2)
    lines = server.telemetry_lines()[first_count - 1 :]
    assert len(lines) >= 3
    for line in lines:
        assert set(contract.TELEMETRY_FIELDS) <= set(line), set(contract.TELEMETRY_FIELDS) - set(
            line
        )
        assert line["framework"] == server.framework
        assert line["port"] == server.port
        assert line["rss_bytes"] > 1_000_000
    gaps_s = [b["t"] - a["t"] for a, b in itertools.pairwise(lines)]
    assert all(0.5 < gap < 2.0 for gap in gaps_s), gaps_s


def test_counter_counts_open_connections_and_requests(server: ServerProcess) -> None:
    require_route(server, contract.ROUTE_COUNTER)
    clients = [httpx.Client(base_url=server.url, timeout=5) for _ in range(5)]
    try:
        for client in clients:
            assert client.get(contract.ROUTE_TEXT).status_code == 200
        counter = clients[0].get(contract.ROUTE_COUNTER).json()
    finally:
        for client in clients:
            client.close()
    assert counter["open"] >= 5
    assert counter["max_open"] >= counter["open"]


def test_log_requests_of_any_method_are_stored(server: ServerProcess) -> None:
    require_route(server, contract.ROUTE_LOG)
    before = latest(server, "stored")
    with httpx.Client(base_url=server.url, timeout=5) as client:
        for method in LOG_METHODS:
            body = json.dumps({"method": method}) if method != "GET" else None
            response = client.request(method, contract.ROUTE_LOG, content=body)
            assert response.content == contract.LOG_REPLY_BODY
    stored = server.wait_telemetry(lambda r: r["stored"] >= before + len(LOG_METHODS))
    assert stored, f"not every record was stored: {server.latest_telemetry()}"


def test_websocket_messages_and_bad_messages_are_counted(server: ServerProcess) -> None:
    require_route(server, contract.ROUTE_WEBSOCKET)
    before = latest(server, "messages")
    with ws_connect(server) as ws:
        for i in range(20):
            ws.send(json.dumps({"a": "b", "i": i}))
        ws.ping().wait(5)  # the messages before the pong have been read
        assert server.wait_telemetry(lambda r: r["messages"] >= before + 20)
        counter = httpx.get(server.url + contract.ROUTE_COUNTER, timeout=5).json()
        assert counter["open"] >= 2  # the WebSocket and this request's connection
    bad_payloads = ("not json", "[1, 2]", b"\x00\x01binary", "x" * contract.WS_MAX_MESSAGE_BYTES)
    bad_before = latest(server, "bad")
    for payload in bad_payloads:
        with ws_connect(server) as ws, pytest.raises(ConnectionClosed):
            ws.send(payload)
            for _ in range(10):
                ws.recv(timeout=5)
    counted = server.wait_telemetry(lambda r: r["bad"] >= bad_before + len(bad_payloads))
    assert counted, f"bad messages not counted: {server.latest_telemetry()}"


# nginx's telemetry comes from its wrapper (its own probe, stub_status): the tick and
# worker tests below do not apply to it; tests/e2e/test_baselines.py checks its workers.
LOOP_SERVERS = [name for name, f in FRAMEWORKS.items() if f.kind != "nginx"]


@pytest.mark.parametrize("framework", one_per_runtime(LOOP_SERVERS))
def test_tick_lag_rises_when_the_loop_is_blocked(framework: str) -> None:
    require_framework(framework)
    with start_server(framework) as server:
        lines_before = len(server.telemetry_lines())
        server.wait_telemetry(lambda r: len(server.telemetry_lines()) > lines_before)
        calm = server.telemetry_lines()[-1]
        # Freezing the process stalls its loop exactly as a blocking call would.
        server.process.send_signal(signal.SIGSTOP)
        time.sleep(0.4)
        server.process.send_signal(signal.SIGCONT)
        stalled = server.wait_telemetry(lambda r: r["t"] > calm["t"] and r["tick_max_ms"] >= 300)
        assert stalled, server.telemetry_lines()[-3:]
        assert calm["tick_max_ms"] < 300


# -- process model -----------------------------------------------------------------------------
@pytest.mark.parametrize("framework", one_per_runtime(LOOP_SERVERS))
def test_two_workers_share_the_port_each_with_telemetry(framework: str) -> None:
    require_framework(framework)
    with start_server(framework, workers=2) as server:
        assert len({r["worker"] for r in server.telemetry_lines()}) == 2
        assert {r["port"] for r in server.telemetry_lines()} == {server.port}
        for _ in range(40):  # new connections: SO_REUSEPORT spreads them by 4-tuple
            assert httpx.get(server.url + contract.ROUTE_TEXT, timeout=5).status_code == 200
        busy = server.wait_telemetry(
            lambda r: len({p for p, x in server.latest_telemetry().items() if x["requests"]}) == 2,
            timeout_s=4,
        )
        assert busy, server.latest_telemetry()
        assert len(server.latest_telemetry()) == 2
        status = server.stop()
        assert status == 0, server.stderr_tail()


def test_sigterm_with_open_connections_exits_0_within_5s(framework: str) -> None:
    server = start_server(framework)
    idle_client = httpx.Client(base_url=server.url, timeout=5)
    try:
        assert idle_client.get(contract.ROUTE_TEXT).status_code == 200
        if not FRAMEWORKS[framework].serves(contract.ROUTE_WEBSOCKET):
            started = time.monotonic()
            assert server.stop() == 0, server.stderr_tail()
            assert time.monotonic() - started < contract.SHUTDOWN_GRACE_S
            return
        with ws_connect(server) as ws:
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=contract.SHUTDOWN_GRACE_S)
            server.process.wait(contract.SHUTDOWN_GRACE_S + 1)
            elapsed_s = time.monotonic() - started
            assert server.process.returncode == 0, server.stderr_tail()
            assert elapsed_s < contract.SHUTDOWN_GRACE_S
            assert ws.close_code == contract.WS_CLOSE_GOING_AWAY
    finally:
        idle_client.close()
        server.stop()


# -- options ---------------------------------------------------------------------------------
@pytest.mark.parametrize("framework", servers_serving())
def test_a_sink_not_offered_is_refused_with_one_line(framework: str) -> None:
    require_framework(framework)
    offered = FRAMEWORKS[framework].sinks
    sink = next((s for s in contract.SINKS if s not in offered), "nope")
    done = subprocess.run(
        [sys.executable, "-m", "servers", framework, "--port", "0", "--sink", sink],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    if sink == "nope":
        assert "invalid choice: 'nope'" in done.stderr
    else:
        assert done.stderr.strip() == f"{framework} serves only the empty sink"

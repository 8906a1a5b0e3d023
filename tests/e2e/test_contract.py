"""The wire contract, asserted against every framework server as a real process."""

from __future__ import annotations

import email.utils
import itertools
import json
import signal
import socket
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from harness.server_process import ServerProcess, start_server
from servers import contract


def ws_connect(
    server: ServerProcess,
    origin: str | None = contract.WS_ORIGIN,
    subprotocols: list[str] | None = None,
) -> ClientConnection:
    return connect(
        f"ws://127.0.0.1:{server.port}{contract.ROUTE_WEBSOCKET}",
        origin=origin,  # type: ignore[arg-type]
        subprotocols=[contract.WS_SUBPROTOCOL] if subprotocols is None else subprotocols,
        max_size=None,
        compression=None,
        open_timeout=5,
        proxy=None,
    )


def close_code_after(ws: ClientConnection, payload: str | bytes) -> int | None:
    """Send `payload`, then wait for the server's close; returns its close code."""
    with pytest.raises(ConnectionClosed):
        ws.send(payload)  # the server may close while a big message is still going out
        for _ in range(10):
            ws.recv(timeout=5)
    return ws.close_code  # 1006 when no close frame came


# Requests every server must answer with 400 and survive (tests/test_baselines.py too).
MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1 extra words\r\n\r\n",
    b"GET / HTTP/9.9x\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
    b"GET / HTTP/1.1\r\nno colon header line\r\n\r\n",
]


def raw_exchange(port: int, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes, read what comes back until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def assert_still_serving(server: ServerProcess) -> None:
    response = httpx.get(server.url + contract.ROUTE_TEXT, timeout=5)
    assert response.status_code == 200
    assert response.content == contract.TEXT_BODY


# -- HTTP routes -------------------------------------------------------------------------
def test_text_route_body_and_headers(server: ServerProcess) -> None:
    response = httpx.get(server.url + contract.ROUTE_TEXT, timeout=5)
    assert response.status_code == 200
    assert response.content == contract.TEXT_BODY
    assert response.headers["content-type"].startswith(contract.TEXT_CONTENT_TYPE)
    assert int(response.headers["content-length"]) == len(contract.TEXT_BODY)
    assert email.utils.parsedate_to_datetime(response.headers["date"]) is not None
    assert response.headers["server"]


def test_keep_alive_serves_many_requests_on_one_connection(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=5) as client:
        bodies = {client.get(contract.ROUTE_TEXT).content for _ in range(50)}
        counter = client.get(contract.ROUTE_COUNTER).json()
    assert bodies == {contract.TEXT_BODY}
    assert counter["open"] >= 1


def test_counter_counts_open_connections_and_requests(server: ServerProcess) -> None:
    clients = [httpx.Client(base_url=server.url, timeout=5) for _ in range(5)]
    try:
        for client in clients:
            assert client.get(contract.ROUTE_TEXT).status_code == 200
        first = clients[0].get(contract.ROUTE_COUNTER)
        second = clients[0].get(contract.ROUTE_COUNTER).json()
    finally:
        for client in clients:
            client.close()
    assert first.headers["content-type"].startswith(contract.JSON_CONTENT_TYPE)
    counter = first.json()
    assert set(counter) == set(contract.COUNTER_FIELDS)
    assert counter["open"] >= 5
    assert counter["max_open"] >= counter["open"]
    assert second["requests"] == counter["requests"] + 1


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH"])
def test_log_accepts_any_method_and_stores_a_record(server: ServerProcess, method: str) -> None:
    before = max(r["stored"] for r in server.latest_telemetry().values())
    body = json.dumps({"method": method}) if method != "GET" else None
    response = httpx.request(method, server.url + contract.ROUTE_LOG, content=body, timeout=5)
    assert response.status_code == 200
    assert response.content == contract.LOG_REPLY_BODY
    assert server.wait_telemetry(lambda r: r["stored"] > before), "the record was not stored"


def test_unknown_path_is_404(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/no/such/route", timeout=5).status_code == 404
    assert_still_serving(server)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_wrong_method_is_405(server: ServerProcess, method: str) -> None:
    assert httpx.request(method, server.url + contract.ROUTE_TEXT, timeout=5).status_code == 405
    assert httpx.request(method, server.url + contract.ROUTE_COUNTER, timeout=5).status_code == 405


# -- bad input: answered, and the server keeps serving -----------------------------------
@pytest.mark.parametrize(
    "request_bytes",
    MALFORMED,
    ids=["garbage", "extra-words", "bad-version", "bad-content-length", "bad-header"],
)
def test_malformed_request_is_400(server: ServerProcess, request_bytes: bytes) -> None:
    reply = raw_exchange(server.port, request_bytes)
    assert reply.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"400"], reply[:200]
    assert_still_serving(server)


def test_oversized_headers_are_refused(server: ServerProcess) -> None:
    request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    reply = raw_exchange(server.port, request)
    status = reply.split(b"\r\n", 1)[0].split(b" ")[1:2]
    assert status and status[0] in (b"400", b"413", b"431"), reply[:200]
    assert_still_serving(server)


# -- WebSocket -------------------------------------------------------------------------------
def test_websocket_handshake_and_messages_are_counted(server: ServerProcess) -> None:
    before = max(r["messages"] for r in server.latest_telemetry().values())
    with ws_connect(server) as ws:
        assert ws.subprotocol == contract.WS_SUBPROTOCOL
        for i in range(20):
            ws.send(json.dumps({"a": "b", "i": i}))
        ws.ping().wait(5)  # the messages before the pong have been read
        assert server.wait_telemetry(lambda r: r["messages"] >= before + 20)
        counter = httpx.get(server.url + contract.ROUTE_COUNTER, timeout=5).json()
        assert counter["open"] >= 2  # the WebSocket and this request's connection


def test_websocket_accepts_a_long_message_under_the_limit(server: ServerProcess) -> None:
    payload = json.dumps({"testKeyValue": "v" * (contract.WS_MAX_MESSAGE_BYTES - 100)})
    assert len(payload) < contract.WS_MAX_MESSAGE_BYTES
    with ws_connect(server) as ws:
        ws.send(payload)
        ws.ping().wait(5)
        ws.send('{"still": "open"}')
        ws.ping().wait(5)


@pytest.mark.parametrize("origin", ["evil", None])
def test_websocket_wrong_origin_is_403(server: ServerProcess, origin: str | None) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(server, origin=origin)
    assert refused.value.response.status_code == contract.WS_BAD_ORIGIN_STATUS
    assert_still_serving(server)


def test_websocket_without_subprotocol_is_400(server: ServerProcess) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(server, subprotocols=[])
    assert refused.value.response.status_code == contract.WS_NO_SUBPROTOCOL_STATUS


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("not json", contract.WS_CLOSE_INVALID_PAYLOAD),
        ("[1, 2]", contract.WS_CLOSE_INVALID_PAYLOAD),
        (b"\x00\x01binary", contract.WS_CLOSE_UNSUPPORTED_DATA),
        ('{"a": "' + "x" * contract.WS_MAX_MESSAGE_BYTES + '"}', contract.WS_CLOSE_TOO_BIG),
    ],
    ids=["invalid-json", "not-an-object", "binary", "over-1MiB"],
)
def test_websocket_bad_message_closes_with_code(
    server: ServerProcess, payload: str | bytes, code: int
) -> None:
    before = max(r["bad"] for r in server.latest_telemetry().values())
    with ws_connect(server) as ws:
        assert close_code_after(ws, payload) == code
    assert server.wait_telemetry(lambda r: r["bad"] > before), "bad message not counted"
    assert_still_serving(server)


# -- telemetry -------------------------------------------------------------------------------
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


def test_tick_lag_rises_when_the_loop_is_blocked(framework: str) -> None:
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


def test_first_telemetry_line_means_listening(framework: str) -> None:
    with start_server(framework) as server:
        first = server.telemetry_lines()[0]
        assert first["port"] == server.port > 0
        assert first["requests"] == 0
        assert_still_serving(server)


# -- process model -----------------------------------------------------------------------------
def test_two_workers_share_the_port_each_with_telemetry(framework: str) -> None:
    with start_server(framework, workers=2) as server:
        assert len({r["worker"] for r in server.telemetry_lines()}) == 2
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


def test_unknown_sink_option_fails_with_one_line() -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "servers", "aiohttp", "--sink", "nope"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "invalid choice: 'nope'" in result.stderr

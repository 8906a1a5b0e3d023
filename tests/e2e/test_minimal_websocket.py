"""The minimal WebSocket servers (`python -m servers.minimal NAME --ws`, the yardsticks of
`harness bench --ws`): each completes the contract's handshake on /ws and a clean close
with a real client library, and listens on the port the OS chose (port 0)."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from drivers.processes import kill_group, spawn
from harness.services.base import wait_listening
from harness.verify.websocket import raw_ws_connect
from servers import contract
from servers.listeners import http_answers
from servers.minimal import WEBSOCKET_MINIMALS
from tests.helpers import one_per_runtime, require_framework

# more than a default pool holds (eventlet.serve's: 1,000; eventlet.wsgi's: 1,024)
HELD_CONNECTIONS = 1100


@contextlib.contextmanager
def minimal_server(framework: str) -> Iterator[int]:
    """The minimal WebSocket server of `framework` on an OS-chosen port; yields the port."""
    require_framework(framework)
    command = [sys.executable, "-m", "servers.minimal", framework, "--ws", "--port", "0"]
    process = spawn(command, death_signal=signal.SIGTERM)
    try:
        yield wait_listening(process, f"the minimal {framework} WebSocket server")
    finally:
        kill_group(process)
        process.wait()


@pytest.fixture(params=one_per_runtime(list(WEBSOCKET_MINIMALS)))
def minimal_port(request: pytest.FixtureRequest) -> Iterator[int]:
    with minimal_server(request.param) as port:
        yield port


def test_a_minimal_websocket_server_handshakes_echoes_and_closes_cleanly(
    minimal_port: int,
) -> None:
    url = f"ws://127.0.0.1:{minimal_port}{contract.ROUTE_WEBSOCKET}"
    with connect(
        url, subprotocols=[contract.WS_SUBPROTOCOL], origin=contract.WS_ORIGIN, open_timeout=5
    ) as ws:
        assert ws.subprotocol == contract.WS_SUBPROTOCOL
        ws.send('{"a": "b"}')
        assert ws.recv(timeout=5) == '{"a": "b"}'
        ws.close()
    received = ws.protocol.close_rcvd
    assert received is not None and received.code == contract.WS_CLOSE_NORMAL
    # a plain request gets an HTTP answer (the harness's readiness check), whatever status
    assert http_answers("127.0.0.1", minimal_port)


# every runtime's own server (eventlet's differs from gevent's in its pool), but the one
# script both Node variants run
@pytest.mark.parametrize(
    "framework",
    [
        pytest.param(name, marks=pytest.mark.slow) if name == "node-express" else name
        for name in WEBSOCKET_MINIMALS
    ],
)
def test_a_minimal_websocket_server_holds_more_connections_than_a_default_pool(
    framework: str,
) -> None:
    with minimal_server(framework) as port, contextlib.ExitStack() as held:
        for _ in range(HELD_CONNECTIONS):
            held.enter_context(raw_ws_connect(port))  # each past its 101
        with raw_ws_connect(port) as last:  # and still answering
            assert last.fileno() >= 0

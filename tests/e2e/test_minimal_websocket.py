"""The minimal WebSocket servers (`python -m servers.minimal NAME --ws`, the yardsticks of
`harness bench --ws`): each completes the contract's handshake on /ws and a clean close
with a real client library, and listens on the port the OS chose (port 0)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest
from websockets.sync.client import connect

from drivers.processes import kill_group, spawn
from harness.services.base import wait_listening
from servers import contract
from servers.listeners import http_answers
from servers.minimal import WEBSOCKET_MINIMALS
from tests.helpers import one_per_runtime, require_framework


@pytest.fixture(params=one_per_runtime(list(WEBSOCKET_MINIMALS)))
def minimal_port(request: pytest.FixtureRequest) -> Iterator[int]:
    require_framework(request.param)
    command = [sys.executable, "-m", "servers.minimal", request.param, "--ws", "--port", "0"]
    process = spawn(command, death_signal=signal.SIGTERM)
    try:
        yield wait_listening(process, f"the minimal {request.param} WebSocket server")
    finally:
        kill_group(process)
        process.wait()


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

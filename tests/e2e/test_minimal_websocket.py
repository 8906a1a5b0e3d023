"""The minimal WebSocket servers (`python -m servers.minimal NAME --ws`, the yardsticks of
`harness bench --ws`): each completes the contract's handshake on /ws and a clean close
with a real client library, and listens on the port the OS chose (port 0)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from websockets.sync.client import connect

from drivers.processes import kill_group, spawn
from harness.services.base import wait_listening
from harness.verify.websocket import raw_ws_connect
from servers import contract
from servers.listeners import http_answers, tree_pids
from servers.minimal import WEBSOCKET_MINIMALS
from tests.helpers import one_per_runtime, require_framework

# more than a default pool holds (eventlet.serve's: 1,000; eventlet.wsgi's: 1,024)
HELD_CONNECTIONS = 1100


@contextlib.contextmanager
def minimal_server(framework: str, workers: int = 1) -> Iterator[int]:
    """The minimal WebSocket server of `framework` on an OS-chosen port; yields the port."""
    with minimal_process(framework, workers) as (_, port):
        yield port


@contextlib.contextmanager
def minimal_process(framework: str, workers: int = 1) -> Iterator[tuple[subprocess.Popen, int]]:
    """The minimal WebSocket server of `framework` as `workers` processes on one OS-chosen
    port; yields its (top) process and the port."""
    require_framework(framework)
    command = [sys.executable, "-m", "servers.minimal", framework, "--ws", "--port", "0"]
    process = spawn([*command, "--workers", str(workers)], death_signal=signal.SIGTERM)
    try:
        yield process, wait_listening(process, f"the minimal {framework} WebSocket server")
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


def connected_pids(process: subprocess.Popen, port: int) -> set[int]:
    """The processes of `process`'s tree holding an accepted connection on `port`."""
    pids = set()
    for pid in tree_pids(process.pid):
        with contextlib.suppress(psutil.Error):
            sockets = psutil.Process(pid).net_connections("tcp")
            if any(s.laddr and s.laddr.port == port and s.raddr for s in sockets):
                pids.add(pid)
    return pids


@pytest.mark.parametrize("framework", one_per_runtime(list(WEBSOCKET_MINIMALS)))
def test_workers_share_the_port_and_stop_together(framework: str) -> None:
    # --workers 2: the way past one process's open files (harness bench --ws at 100,000)
    with minimal_process(framework, workers=2) as (process, port):
        with contextlib.ExitStack() as held:
            for _ in range(40):  # SO_REUSEPORT hashes them (Node: round-robin): both get some
                held.enter_context(raw_ws_connect(port))
            deadline = time.monotonic() + 5
            while len(connected_pids(process, port)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(connected_pids(process, port)) == 2
        # closed first: aiohttp's run_app waits for open WebSockets on SIGTERM (60 s)
        workers = [pid for pid in tree_pids(process.pid) if pid != process.pid]
        process.send_signal(signal.SIGTERM)  # the supervisor stops them all
        process.wait(timeout=10)  # (the minimal workers die by it: status 1, said on stderr)
        assert not [pid for pid in workers if psutil.pid_exists(pid)]

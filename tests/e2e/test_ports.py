"""Ports and readiness: a service is ready when *its* process holds the
listening socket, never because something answered on a port picked free, closed and
reused. A foreign listener planted on the port the harness would use is not taken for ours.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from harness.services import base, memcached
from harness.services.balancer import LoadBalancer
from harness.services.memcached import Memcached
from model.errors import UserError
from servers import listeners
from servers.baselines import nginx
from tests.helpers import closed_port, require_tool


class _Foreign(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"foreign")

    def log_message(self, *args: object) -> None:
        pass


class _ReusePortServer(ThreadingHTTPServer):
    def server_bind(self) -> None:  # shares a port with anyone else setting SO_REUSEPORT
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


@pytest.fixture(params=["plain", "reuseport"])
def foreign(request: pytest.FixtureRequest) -> Iterator[int]:
    """Another process's HTTP listener (here: this one's), answering 200 to anything."""
    kind = ThreadingHTTPServer if request.param == "plain" else _ReusePortServer
    server = kind(("127.0.0.1", 0), _Foreign)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_memcached_that_never_listens_is_not_taken_for_a_foreign_listener(
    foreign: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "memcached"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")  # starts, never listens
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(memcached, "tool_path", lambda _name: str(fake))
    monkeypatch.setattr(memcached, "free_port", lambda *_: foreign, raising=False)  # the old way
    monkeypatch.setattr(base, "READY_TIMEOUT_S", 1.5)
    with pytest.raises(UserError, match="did not listen"):
        Memcached().stop()


def test_memcached_listens_on_a_port_of_its_own() -> None:
    require_tool("memcached")
    with Memcached() as memcached:
        assert memcached.port in listeners.listening_ports([memcached.process.pid])
        memcached.set("k", b"v")


def test_ferretdb_listens_on_a_port_of_its_own(ferretdb) -> None:
    assert ferretdb.port in listeners.listening_ports([ferretdb.process.pid])


def test_nginx_is_not_taken_for_a_foreign_listener_on_its_port(
    foreign: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_tool("nginx")
    picked: list[int] = []

    def first_the_foreign_port(host: str = "127.0.0.1") -> int:
        picked.append(foreign if not picked else real_free_port(host))
        return picked[-1]

    real_free_port = nginx.free_port
    monkeypatch.setattr(nginx, "free_port", first_the_foreign_port)
    with LoadBalancer([closed_port()], cpus=None) as balancer:
        assert picked[0] == foreign
        assert balancer.port != foreign  # a second attempt, on a port nginx holds alone
        held = listeners.listening_ports(listeners.tree_pids(balancer.pid))
        assert balancer.port in held
        assert not listeners.other_listeners({balancer.port}, listeners.tree_pids(balancer.pid))


def test_a_worker_forked_after_the_tree_was_read_is_not_another_process() -> None:
    """nginx's workers, a supervisor's: forked after the readiness check read the tree,
    they hold the same listening socket, and are no other program on the port."""
    code = (
        "import os, socket, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True)\n"
        "os.fork(); time.sleep(30)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        deadline = time.monotonic() + 5
        while not psutil.Process(process.pid).children() and time.monotonic() < deadline:
            time.sleep(0.02)
        [child] = psutil.Process(process.pid).children()
        read_before_the_fork = [process.pid]
        assert listeners.other_listeners({port}, read_before_the_fork) == {port: child.pid}
        assert listeners.other_listeners({port}, read_before_the_fork, root=process.pid) == {}
    finally:
        for pid in listeners.tree_pids(process.pid)[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait()

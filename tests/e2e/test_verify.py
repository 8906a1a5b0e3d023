"""`harness verify` checks: they pass on our servers and fail on a server that breaks the rules."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from harness.verify import HTTP_CHECKS, run_checks, verify_framework
from servers import FRAMEWORKS, Framework
from tests.helpers import require_framework


class StallingHandler(http.server.BaseHTTPRequestHandler):
    """Keep-alive, headers and body in two writes, no TCP_NODELAY: delayed-ACK stalls."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"not the contract's body"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stalling_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StallingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_checks_fail_on_a_server_that_breaks_the_contract(stalling_server: str) -> None:
    checks = {c.name: c for c in run_checks(stalling_server, HTTP_CHECKS)}
    assert not checks["text"].ok and "body" in checks["text"].detail
    assert not checks["not-found"].ok
    latency = checks["sequential-latency"]
    assert not latency.ok, latency.detail
    assert "TCP_NODELAY" in latency.detail


def test_verify_framework_passes_every_check() -> None:
    require_framework("aiohttp")
    result = verify_framework("aiohttp")
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.name for c in result.checks}
    assert {"text", "malformed", "ws-origin", "ws-1007", "sequential-latency", "sigterm"} <= names


def test_verify_reports_a_server_that_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server process knows no 'broken' framework: it exits before listening.
    monkeypatch.setitem(FRAMEWORKS, "broken", Framework("broken", "servers.none", (), ("x",)))
    result = verify_framework("broken")
    assert not result.ok
    assert result.error and "exited with status 2 before listening" in result.error


def test_verify_skips_a_sink_the_framework_does_not_offer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FRAMEWORKS, "bare", Framework("bare", "servers.none", (), ("x",)))
    result = verify_framework("bare", sink="file")
    assert result.skipped == "bare has no file sink"
    assert result.checks == ()

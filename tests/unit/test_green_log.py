"""The green runtime's WSGI application (gevent, eventlet) on hostile `/log` requests,
driven in-process with a fake connection: framing refused before routing, a truncated
body, a body over the limit and a body past its deadline never become a record, and the
connection is closed."""

from __future__ import annotations

import io
from typing import Any

import pytest

from servers import contract
from servers.core.body_limit import TOO_LARGE_BODY
from servers.core.state import ServerState
from servers.runtimes.green.app import GreenApp
from servers.runtimes.green.deadlines import ClientDeadlines, ClientTimeout


class FakeSink:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def store(self, record: dict[str, Any]) -> None:
        self.records.append(record)

    def store_and_wait(self, record: dict[str, Any]) -> None:
        self.records.append(record)


class FakeBackends:
    files_dir = None
    gridfs = None
    memcached = None


class FakeConnection:
    def __init__(self) -> None:
        self.closing = False
        # Real deadlines on a timer that never fires: the tests throw ClientTimeout
        # from the input instead, as the timer would into a blocked read.
        self.client_deadlines = ClientDeadlines(
            call_later=lambda seconds, function: lambda: None,
            head_timeout_s=contract.HEAD_TIMEOUT_S,
            body_timeout_s=contract.BODY_TIMEOUT_S,
        )

    def deadlines(self, environ: dict[str, Any]) -> ClientDeadlines:
        return self.client_deadlines

    def request_headers(self, environ: dict[str, Any]) -> dict[str, str]:
        return dict(environ["raw"])

    def raw_headers(self, environ: dict[str, Any]) -> list[tuple[str, str]]:
        return environ["raw"]

    def close_after_response(self, environ: dict[str, Any]) -> list[tuple[str, str]]:
        self.closing = True
        return [("Connection", "close")]

    def take_over(self, environ: dict[str, Any]):
        raise AssertionError("no WebSocket here")

    def forget_request(self, environ: dict[str, Any]) -> None:
        raise AssertionError("no WebSocket here")


class ShortInput:
    """eventlet's wsgi.input at the client's EOF: what came, then nothing."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(size)


class FailingInput:
    """gevent's wsgi.input at the client's EOF: it raises."""

    def read(self, size: int = -1) -> bytes:
        raise OSError("unexpected end of file while reading request")


class LateInput:
    """Either framework's wsgi.input when the client misses the body deadline."""

    def read(self, size: int = -1) -> bytes:
        raise ClientTimeout("the client missed its deadline")


@pytest.fixture
def app() -> tuple[GreenApp, FakeSink, FakeConnection]:
    sink, connection = FakeSink(), FakeConnection()
    green = GreenApp(ServerState("test", "test"), sink, FakeBackends(), connection, "test")  # type: ignore[arg-type]
    return green, sink, connection


def call(
    app: GreenApp,
    raw: list[tuple[str, str]],
    body: Any,
    length: str | None,
    path: str = contract.ROUTE_LOG,
) -> str:
    environ = {
        "REQUEST_METHOD": "POST" if path == contract.ROUTE_LOG else "GET",
        "PATH_INFO": path,
        "wsgi.input": body if not isinstance(body, bytes) else ShortInput(body),
        "raw": raw,
    }
    if length is not None:
        environ["CONTENT_LENGTH"] = length
    statuses: list[str] = []
    b"".join(app.wsgi(environ, lambda status, headers: statuses.append(status)))
    return statuses[0]


def test_a_sound_request_is_stored(app) -> None:
    green, sink, connection = app
    assert call(green, [("Content-Length", "3")], b"abc", "3").startswith("200")
    assert [r["body"] for r in sink.records] == ["abc"] and not connection.closing


@pytest.mark.parametrize(
    "raw",
    [
        [("Transfer-Encoding", "xchunked")],
        [("Content-Length", "0"), ("Content-Length", "40")],
        [("Content-Length", "+3")],
        [("Content-Length", "3"), ("Transfer-Encoding", "chunked")],
        [("X-A", "a\x00b")],
    ],
    ids=["xchunked", "two-lengths", "plus", "both", "nul"],
)
def test_ambiguous_framing_is_400_and_close(app, raw: list[tuple[str, str]]) -> None:
    green, sink, connection = app
    assert call(green, raw, b"abc", None).startswith("400")
    assert sink.records == [] and connection.closing


@pytest.mark.parametrize("body", [b"abc", FailingInput()], ids=["eventlet", "gevent"])
def test_a_truncated_body_is_400_and_no_record(app, body: Any) -> None:
    green, sink, connection = app
    assert call(green, [("Content-Length", "100")], body, "100").startswith("400")
    assert sink.records == [] and connection.closing


def test_a_declared_body_over_the_limit_is_413_before_reading(app) -> None:
    green, sink, connection = app
    length = str(2**31)
    assert call(green, [("Content-Length", length)], FailingInput(), length).startswith("413")
    assert sink.records == [] and connection.closing


def test_a_413_has_the_contracts_words_on_any_python(app) -> None:
    green, _, _ = app
    length = str(2**31)
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": contract.ROUTE_LOG,
        "wsgi.input": FailingInput(),
        "raw": [("Content-Length", length)],
        "CONTENT_LENGTH": length,
    }
    statuses: list[str] = []
    body = b"".join(green.wsgi(environ, lambda status, headers: statuses.append(status)))
    assert statuses == ["413 Request Entity Too Large"] and body == TOO_LARGE_BODY


def test_a_chunked_body_over_the_limit_is_413(app) -> None:
    green, sink, connection = app
    body = b"x" * (contract.LOG_MAX_BODY_BYTES + 10)
    assert call(green, [("Transfer-Encoding", "chunked")], body, None).startswith("413")
    assert sink.records == [] and connection.closing


def test_a_body_past_its_deadline_is_408_and_no_record(app) -> None:
    green, sink, connection = app
    assert call(green, [("Content-Length", "100")], LateInput(), "100").startswith("408")
    assert sink.records == [] and connection.closing


def test_a_body_no_route_reads_is_read_within_its_deadline(app) -> None:
    """`GET /` with a body: read and dropped before the answer, under the body deadline."""
    green, _, connection = app
    assert call(green, [("Content-Length", "3")], b"abc", "3", "/").startswith("200")
    assert not connection.closing
    assert call(green, [("Content-Length", "3")], LateInput(), "3", "/").startswith("408")
    assert connection.closing

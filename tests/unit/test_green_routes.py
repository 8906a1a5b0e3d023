"""The green runtime's dispatch (servers.runtimes.green.app) and WebSocket session
(servers.runtimes.green.websocket), driven in-process: `/` and its HEAD, 404 and 405 with
the path's Allow, and a session over a real socket pair that joins a fragmented message,
stores it, refuses a binary one and answers the client's close."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, TextMessage

from servers import contract
from servers.core.state import ServerState
from servers.runtimes.green.app import GreenApp
from servers.runtimes.green.websocket import WebSocketSession


class FakeSink:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def store(self, record: dict[str, Any]) -> bool:
        self.records.append(record)
        return True

    def store_and_wait(self, record: dict[str, Any]) -> None:
        self.records.append(record)


class FakeBackends:
    files_dir = None
    gridfs = None
    memcached = None


class FakeConnection:
    """A connection no route here needs more of than its raw headers."""

    def raw_headers(self, environ: dict[str, Any]) -> list[tuple[str, str]]:
        return []

    def deadlines(self, environ: dict[str, Any]) -> Any:
        raise AssertionError("no body here")


@pytest.fixture
def app() -> GreenApp:
    return GreenApp(
        ServerState("test", "test"), FakeSink(), FakeBackends(), FakeConnection(), "test"
    )  # type: ignore[arg-type]


def call(app: GreenApp, method: str, path: str) -> tuple[str, dict[str, str], bytes]:
    replies: list[tuple[str, list[tuple[str, str]]]] = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path}
    body = b"".join(app.wsgi(environ, lambda status, headers: replies.append((status, headers))))
    [(status, headers)] = replies
    return status, dict(headers), body


def test_the_text_route_and_its_head(app: GreenApp) -> None:
    status, headers, body = call(app, "GET", contract.ROUTE_TEXT)
    assert status == "200 OK" and body == contract.TEXT_BODY
    assert headers["Content-Length"] == str(len(contract.TEXT_BODY)) and "Date" in headers
    head_status, head_headers, head_body = call(app, "HEAD", contract.ROUTE_TEXT)
    assert head_status == "200 OK" and head_body == b"" and head_headers == headers


def test_an_unknown_path_is_404_and_a_wrong_method_405_with_allow(app: GreenApp) -> None:
    status, _, body = call(app, "GET", "/nowhere")
    assert status == "404 Not Found" and body == b"404: Not Found"
    status, headers, _ = call(app, "DELETE", contract.ROUTE_COUNTER)
    assert status == "405 Method Not Allowed" and headers["Allow"] == "GET,HEAD"


def session_over(frames: list[Event]) -> tuple[ServerState, FakeSink, list[Event]]:
    """Run a session on one end of a socket pair after the client wrote `frames` (and a
    close) to the other; what the client then reads from the server."""
    server_end, client_end = socket.socketpair()
    client = Connection(ConnectionType.CLIENT)
    state, sink = ServerState("test", "test"), FakeSink()
    with server_end, client_end:
        client_end.sendall(b"".join(client.send(frame) for frame in frames))
        WebSocketSession(server_end, state, sink, share_turn=lambda: None).run()
        server_end.close()  # as the WSGI server does once the application returns
        client_end.settimeout(5.0)
        received = b""
        while chunk := client_end.recv(65536):
            received += chunk
    client.receive_data(received)
    return state, sink, list(client.events())


def test_a_fragmented_message_is_stored_whole_and_a_close_answered() -> None:
    state, sink, events = session_over(
        [
            TextMessage(data='{"a": ', message_finished=False),
            TextMessage(data="1}", message_finished=True),
            CloseConnection(code=contract.WS_CLOSE_NORMAL),
        ]
    )
    assert [r["body"] for r in sink.records] == ['{"a": 1}'] and state.messages == 1
    assert [(type(e), getattr(e, "code", None)) for e in events] == [
        (CloseConnection, contract.WS_CLOSE_NORMAL)
    ]


def test_a_binary_message_is_refused_with_1003() -> None:
    state, sink, events = session_over(
        [BytesMessage(data=b"\x00"), CloseConnection(code=contract.WS_CLOSE_NORMAL)]
    )
    assert sink.records == [] and state.bad == 1
    assert [getattr(e, "code", None) for e in events] == [contract.WS_CLOSE_UNSUPPORTED_DATA]

"""What the green WSGI application (servers.runtimes.green.app) is handed by a framework
module (gevent, eventlet): the WSGI types it speaks, the sink it stores records in and the
connection under each request, written once for the routes, the WebSocket upgrade and the
framework modules to share."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO, Protocol

from servers.runtimes.green.deadlines import ClientDeadlines

# A WSGI application: environ and start_response in, body chunks out.
StartResponse = Callable[..., Callable[[bytes], Any]]
Environ = dict[str, Any]
Headers = list[tuple[str, str]]
Handler = Callable[[Environ, StartResponse], Iterable[bytes]]
# path -> method -> handler; "*" answers any method the path does not list.
Routes = dict[str, dict[str, Handler]]


class Sink(Protocol):
    """A green sink (`servers.runtimes.green.sinks`): its calls block the calling green thread."""

    def store(self, record: dict[str, Any]) -> bool:
        """Accept a WebSocket message's record, stored later (fire and forget); False when
        the sink refuses it (its queue is full)."""
        ...

    def store_and_wait(self, record: dict[str, Any]) -> None:
        """Return once the record is stored; raise `SinkUnavailable` when it cannot be."""
        ...


class GreenConnection(Protocol):
    """What the framework lets the application do with the connection under a request."""

    def request_headers(self, environ: Environ) -> dict[str, str]:
        """The request's headers as the client sent them (names in their own case)."""
        ...

    def raw_headers(self, environ: Environ) -> Iterable[tuple[str, str]]:
        """The request's header fields as received: every repeat, nothing dropped yet."""
        ...

    def deadlines(self, environ: Environ) -> ClientDeadlines:
        """The slow-client deadlines of the connection the request came on."""
        ...

    def close_after_response(self, environ: Environ) -> Headers:
        """Close the connection once this response is out, reading nothing more from it;
        the headers the response must carry to say so (none if the server adds them)."""
        ...

    def take_over(self, environ: Environ) -> tuple[socket.socket, BinaryIO, BinaryIO | None]:
        """The socket, its buffered reader and its buffered writer (None where the server
        writes to the socket itself), after telling the server to send nothing more on
        this connection and to close it once the application returns. The application
        closes the reader and the writer once the 101 is out (`release_buffers`): the
        server must not use them after that."""
        ...

    def forget_request(self, environ: Environ) -> None:
        """Once the 101 is out: drop what the server keeps of the upgrade request (its
        parsed headers, the environ's contents) for the rest of the connection; the
        server reads none of it after the application returns."""
        ...

    def share_turn(self) -> None:
        """Called by a WebSocket session woken by its socket, before it works on what came:
        where the framework's loop wakes every ready socket's green thread in one turn, it
        defers the work past a bounded number a turn (a close storm in batches, the tick
        between them); where its hub hands out a bounded number already, it does nothing."""
        ...

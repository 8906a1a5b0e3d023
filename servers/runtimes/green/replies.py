"""How the green WSGI application's routes write a reply: the Server header, the header list
of a body, the precomputed `Date` of the text route, and the error answers in
servers.core.error_replies' words (`404: Not Found`, text/plain), one of them closing the
connection."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from email.utils import formatdate

from servers.core.error_replies import error_body, status_line
from servers.runtimes.green.interfaces import Environ, GreenConnection, Headers, StartResponse

# The body of a reply that has none (HEAD, a WebSocket after its session): one shared tuple.
EMPTY: tuple[bytes, ...] = ()


def server_software(framework: str, version: str) -> str:
    """The Server header, in aiohttp's shape: `Python/3.11 gevent/24.2.1`."""
    return f"Python/{sys.version_info.major}.{sys.version_info.minor} {framework}/{version}"


class DatedHeaders:
    """A response's fixed headers plus this second's `Date`, the list made once a second.

    pywsgi and eventlet.wsgi format a Date for each response that carries none
    (time.gmtime and a %-format: 1.25 µs) and add none to one that does. On the text
    route this bought 1.3 µs per keep-alive `GET /` on gevent and 1.5 µs on eventlet
    (in-process, net of the framework checking and encoding one more header; the minimal
    apps still format theirs). The list is shared by every response of the second: the
    frameworks only read it (both append a Content-Length only where there is none).
    """

    __slots__ = ("_fixed", "_headers", "_second")

    def __init__(self, fixed: Headers) -> None:
        self._fixed = fixed
        self._second = -1
        self._headers = fixed

    def now(self) -> Headers:
        """The fixed headers and a Date (RFC 9110 IMF-fixdate) of the current second."""
        second = int(time.time())
        if second != self._second:
            self._headers = [*self._fixed, ("Date", formatdate(second, usegmt=True))]
            self._second = second
        return self._headers


class Replies:
    """The reply helpers every route shares, for one server (its Server header) and one
    framework's connections (to close one after a refusal)."""

    def __init__(self, server_software: str, connection: GreenConnection) -> None:
        self.server_header = ("Server", server_software)
        self._connection = connection

    def headers(self, content_type: str, body: bytes) -> Headers:
        """Content-Type, Content-Length and Server for `body`: a new list each call."""
        return [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            self.server_header,
        ]

    def plain(
        self,
        start_response: StartResponse,
        code: int,
        body: bytes | None = None,
        extra: Iterable[tuple[str, str]] = (),
    ) -> tuple[bytes, ...]:
        """An error answer, by default in aiohttp's shape: `404: Not Found`, text/plain."""
        if body is None:
            body = error_body(code)
        headers = self.headers("text/plain; charset=utf-8", body)
        headers.extend(extra)
        start_response(status_line(code), headers)
        return (body,)

    def refuse(self, environ: Environ, start_response: StartResponse, code: int) -> Iterable[bytes]:
        """Answer `code` and close: what is left on the connection cannot be trusted."""
        return self.plain(
            start_response, code, extra=self._connection.close_after_response(environ)
        )

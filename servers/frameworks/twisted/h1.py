"""HTTP/1.1 on twisted.web: the request (its body in memory, within the contract's limit)
and the channel (counted, drained on shutdown, held to the slow-client deadlines)."""

from __future__ import annotations

from io import BytesIO
from typing import Any

from twisted.web._http2 import H2Stream  # twisted.web's HTTP/2 (h2 package)
from twisted.web.http import HTTPChannel
from twisted.web.server import Request

from servers.core.body_limit import (
    TOO_LARGE_BODY,
    TOO_LARGE_STATUS,
    BodyCounter,
    declared_too_large,
)
from servers.core.error_replies import status_line
from servers.frameworks.twisted.connections import (
    ServingSite,
    connection_closed,
    connection_opened,
)
from servers.frameworks.twisted.replies import reply

# LineReceiver drops a connection whose header line is over MAX_LENGTH without a word;
# answer it the way HTTPChannel answers a header block over totalHeadersSize.
_HEADER_TOO_LONG_REPLY = (
    b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)
_TOO_LARGE_LENGTH = b"%d" % len(TOO_LARGE_BODY)
_TOO_LARGE_REPLY = (
    b"HTTP/1.1 %s\r\nConnection: close\r\n"
    b"Content-Type: text/plain\r\nContent-Length: %s\r\n\r\n%s"
    % (status_line(TOO_LARGE_STATUS).encode(), _TOO_LARGE_LENGTH, TOO_LARGE_BODY)
)


class ContractRequest(Request):
    """A twisted.web request whose body stays in memory, and within the contract's limit.

    twisted.web takes a body of any size (150 MiB measured: 200, 656 MiB RSS). A declared
    Content-Length over `contract.LOG_MAX_BODY_BYTES` is answered 413 before any of the
    body is read, a chunked body once it grows past it; the connection is then closed
    and the request never reaches a route (the limit holds on every route: only `/log`
    takes a body).
    """

    _refused = False
    _body: BodyCounter | None = None

    def gotLength(self, length: int | None) -> None:
        # twisted.web spools bodies over 100 kB (and every chunked body) to a temporary
        # file: blocking disk I/O on the reactor.
        self.content = BytesIO()
        self._body = BodyCounter()
        if declared_too_large(length):
            self._refuse_too_large()

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            return
        assert self._body is not None  # gotLength came first
        if not self._body.take(len(data)):
            self._refuse_too_large()
            return
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self._refused:
            super().requestReceived(command, path, version)
        elif isinstance(self.channel, H2Stream):  # HTTP/2: answered now its stream ended
            self.method, self.uri, self.clientproto = command, path, version
            reply(self, TOO_LARGE_STATUS, TOO_LARGE_BODY, _TOO_LARGE_LENGTH)
        # HTTP/1.1: the refusal was answered already and the connection closed

    def _refuse_too_large(self) -> None:
        self._refused = True
        self.content = BytesIO()
        channel = self.channel
        if isinstance(channel, H2Stream):
            # The connection carries other streams: this one's body is dropped as it comes
            # (handleContentChunk) and answered 413 when it ends (requestReceived).
            return
        if channel.transport is not None and not channel.transport.disconnecting:
            channel.transport.write(_TOO_LARGE_REPLY)
            channel.loseConnection()


class ContractChannel(HTTPChannel):
    """An HTTP/1.1 connection that is counted, closed cleanly on shutdown, and held to
    the contract's slow-client deadlines (docs/contract.md, "Slow clients").

    The deadlines ride on HTTPChannel's own timer (TimeoutMixin), which the channel
    already arms at `connectionMade` (with the site's timeout: the head deadline),
    cancels while a request is handled (`allContentReceived`) and arms again with the
    saved period when a response is done (`requestDone`). Two changes make it the
    contract's: data no longer resets it (`resetTimeout`), so it is a deadline and not an
    idle timer, and a request with a body gets the body deadline from the end of its head.
    """

    site: ServingSite

    def connectionMade(self) -> None:
        super().connectionMade()  # sets TCP_NODELAY, arms the timer with site.timeOut
        connection_opened(self.site, self)

    def resetTimeout(self) -> None:
        """Not on every read: a client trickling a byte at a time must not keep its
        connection (HTTPChannel.dataReceived calls this for each chunk received)."""

    def allHeadersReceived(self) -> None:
        super().allHeadersReceived()
        if self.length != 0:  # a body follows (a length, or chunked: None)
            self.setTimeout(self.site.body_timeout_s)

    def allContentReceived(self) -> None:
        # HTTPChannel cancels the timer here and saves the period it had, to arm it with
        # when the response is done (requestDone, which may run within this call): that
        # must be the head deadline, also when the period was the body's.
        self.timeOut = self.site.timeOut
        super().allContentReceived()

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        connection_closed(self.site, self)

    def requestDone(self, request: Request) -> None:
        super().requestDone(request)  # answers the pipelined requests already read, too
        # HTTPChannel stops reading when the transport's buffer fills (pauseProducing)
        # only if no request is being handled at that moment; with pipelined requests one
        # always is, so a client that pipelines and never reads the answers was read on
        # and answered into memory without end. Stop reading once those are answered:
        # resumeProducing reads again when the buffer drains, and the head deadline
        # closes a connection whose client never reads.
        if self._waitingForTransport and not self._handlingRequest and self.transport:
            self._networkProducer.pauseProducing()

    def handed_over(self) -> None:
        """The WebSocket protocol took the transport: it counts the close from now on."""
        self.site.channels.discard(self)

    def checkPersistence(self, request: Request, version: bytes) -> bool:
        if self.site.draining:
            request.responseHeaders.setRawHeaders(b"connection", [b"close"])
            return False
        return super().checkPersistence(request, version)

    def lineLengthExceeded(self, line: bytes) -> None:
        if not self.transport.disconnecting:
            self.transport.write(_HEADER_TOO_LONG_REPLY)
            self.loseConnection()

    def close_when_idle(self) -> None:
        """Close now unless a request is under way; that one closes after its response.

        A channel in line mode is between requests or inside a request's headers: no
        request has reached a handler (aiohttp closes those at once too). In raw mode a
        body is arriving or a handler has it (`/log` waiting for the sink).
        """
        if self.transport.disconnecting:
            return
        if not self.requests or self.line_mode:
            self.loseConnection()
            return
        self.persistent = False
        for request in self.requests:
            if not request.startedWriting:
                request.responseHeaders.setRawHeaders(b"connection", [b"close"])

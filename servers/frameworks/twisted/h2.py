"""HTTP/2 (h2, h2c) on twisted.web's own H2Connection: counted, drained on shutdown, its
frames held to the contract's HTTP/2 limits (servers.core.h2_budget)."""

from __future__ import annotations

import contextlib
from typing import Any

from h2.exceptions import H2Error
from twisted.web._http2 import H2Connection  # twisted.web's HTTP/2 (h2 package)

from servers import contract
from servers.core.h2_budget import FrameBudget
from servers.frameworks.twisted.connections import (
    ServingSite,
    connection_closed,
    connection_opened,
)


class ContractH2Connection(H2Connection):
    """An HTTP/2 connection (h2, h2c): twisted.web's own, counted and closed on shutdown.

    Its timer is H2Connection's: the connection is closed once no frame arrived for the
    head timeout (an idle timer: streams share the connection, so no one stream's head or
    body can hold it to a deadline), also while its TLS handshake has not finished. The
    frames it reads are counted against the contract's HTTP/2 limits (FrameBudget): past
    one, GOAWAY ENHANCE_YOUR_CALM and a close.
    """

    site: ServingSite
    _counted_closed = False
    _calmed = False  # a limit was passed: the rest of what the client sends is not read
    # On its timeout H2Connection sends a GOAWAY and closes once it is written, aborting
    # after this long: a client that never finished its TLS handshake would otherwise
    # hold the connection 15 s (twisted.web's default) past the head timeout.
    abortTimeout = 1

    def connectionMade(self) -> None:
        self.budget = FrameBudget()
        super().connectionMade()  # sets TCP_NODELAY, arms the timer, sends SETTINGS
        connection_opened(self.site, self)

    def dataReceived(self, data: bytes) -> None:
        if self._calmed:
            return
        passed = self.budget.received(data)
        if passed is not None:
            self._enhance_your_calm(passed)
            return
        super().dataReceived(data)

    def _enhance_your_calm(self, passed: str) -> None:
        """GOAWAY ENHANCE_YOUR_CALM (its debug data naming the limit `passed`) and close,
        aborting after abortTimeout: a client that reads nothing would hold the close."""
        self._calmed = True
        with contextlib.suppress(H2Error):
            self.conn.close_connection(
                error_code=contract.H2_ENHANCE_YOUR_CALM, additional_data=passed.encode()
            )
            self.transport.write(self.conn.data_to_send())
        self._abortingCall = self.callLater(self.abortTimeout, self.forceAbortClient)
        self.transport.loseConnection()

    def connectionLost(self, reason: Any, _cancelTimeouts: bool = True) -> None:
        super().connectionLost(reason, _cancelTimeouts)
        # H2Connection calls this itself on a GOAWAY, and the transport calls it again.
        if not self._counted_closed:
            self._counted_closed = True
            connection_closed(self.site, self)

    # A request and its RST_STREAM in one read (cleartext h2c, above all): h2 has closed
    # the stream by the time twisted.web renders the request, and a write to it raised
    # StreamClosedError (or StreamIDTooLowError) out of dataReceived, dropping every other
    # stream of the connection. The reset stream's answer has nowhere to go: it is
    # dropped, and the connection serves on (verify's h2-reset-stream).
    def _was_reset(self, stream_id: int) -> bool:
        stream = self.conn.streams.get(stream_id)
        return stream is None or stream.closed

    def writeHeaders(
        self, version: bytes, code: bytes, reason: bytes, headers: Any, streamID: int
    ) -> None:
        if not self._was_reset(streamID):
            super().writeHeaders(version, code, reason, headers, streamID)

    def writeDataToStream(self, streamID: int, data: bytes) -> None:
        if not self._was_reset(streamID):
            self.budget.sent(len(data))
            super().writeDataToStream(streamID, data)

    def endRequest(self, streamID: int) -> None:
        if not self._was_reset(streamID):  # a reset one: its StreamReset event cleans up
            self.budget.served()
            super().endRequest(streamID)

    def close_when_idle(self) -> None:
        """Close now unless a stream is under way (the drain asks again until none is)."""
        if not self.streams and self.transport is not None:
            self.transport.loseConnection()

"""`/ws` on autobahn: one protocol per agent connection (its messages to the sink, the RFC
6455 close rules autobahn leaves to us, backpressure), lean once open, and the factory that
shares its options and idle defaults among all of them."""

from __future__ import annotations

from types import FunctionType
from typing import Any

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.protocol import TrafficStats
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from servers import contract
from servers.core.shutdown import WS_SHUTDOWN_REASON
from servers.core.state import ServerState
from servers.core.websocket import peer_close_code_valid
from servers.core.ws_messages import take_message
from servers.runtimes.twisted.sinks import TwistedSink


@implementer(IPushProducer)
class _ReadWhileDraining:
    """Backpressure for one WebSocket: the transport stops reading from a peer while what
    we owe it (pongs to its pings, close frames) waits unsent past the transport's buffer
    size, and reads again once it drained. Without it a client that pings and never reads
    grew the server's memory without bound (85 to 178 MiB, never returned)."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport

    def pauseProducing(self) -> None:
        self._transport.pauseProducing()  # stopReading

    def resumeProducing(self) -> None:
        self._transport.resumeProducing()  # startReading, unless disconnecting

    def stopProducing(self) -> None:
        return None


# What an open, idle autobahn connection keeps that it never reads again (tracemalloc, 2,000
# connections, autobahn 26.11): the handshake's request and response, kept "for the test
# suite", an empty send deque of 760 B used only by sync or chopped sends (none here), and
# a TrafficStats nothing here reads (one on the factory's protocol class counts for all).
_HANDSHAKE_LEFTOVERS = frozenset(
    {
        "http_headers",
        "http_headers_cnt",
        "http_request_data",
        "http_request_host",
        "http_request_params",
        "http_request_path",
        "http_request_uri",
        "http_response_data",
        "http_status_line",
        "_wskey",
        "websocket_origin",
        "websocket_protocols",
        "websocket_extensions",
        "send_queue",
        "trafficStats",
    }
)
# autobahn's per-connection flags and timers while a connection is open and idle: as class
# attributes (MessageFactory's protocol class) an instance keeps only those it changed.
_IDLE_DEFAULTS: dict[str, Any] = {
    **dict.fromkeys(
        (
            "_perMessageCompress",
            "autoPingPending",
            "autoPingPendingCall",
            "autoPingPendingSent",
            "autoPingTimeoutCall",
            "closeHandshakeTimeoutCall",
            "current_frame",
            "localCloseCode",
            "localCloseReason",
            "openHandshakeTimeoutCall",
            "remoteCloseCode",
            "remoteCloseReason",
            "trackedTimings",
            "wasNotCleanReason",
        )
    ),
    **dict.fromkeys(
        (
            "closedByMe",
            "droppedByMe",
            "failedByMe",
            "inside_message",
            "triggered",
            "wasClean",
            "wasCloseHandshakeTimeout",
            "wasMaxFramePayloadSizeExceeded",
            "wasMaxMessagePayloadSizeExceeded",
            "wasOpenHandshakeTimeout",
            "wasServerConnectionDropTimeout",
            "wasServingFlashSocketPolicyFile",
        ),
        False,
    ),
    "autoPingPendingSeq": 0,
    "connected": 1,
    "data": b"",
    "send_state": WebSocketServerProtocol.SEND_STATE_GROUND,
    "state": WebSocketServerProtocol.STATE_OPEN,
    "send_queue": (),  # len() 0 as autobahn asks; an append would fail loudly
}


class MessageProtocol(WebSocketServerProtocol):
    """One agent connection: each text message is a JSON object for the sink.

    Lean once open (`_shed`): autobahn copies its 29 options into every connection and
    keeps the handshake, an 86-entry dict of 3.3 KB and ~9 KB a connection in all; the
    options and idle defaults live on the factory's protocol class instead, so an idle
    connection's dict holds the ~15 attributes it owns."""

    factory: MessageFactory

    def connectionMade(self) -> None:
        super().connectionMade()
        transport = self.transport
        if transport is not None and hasattr(transport, "pauseProducing"):
            # The HTTP channel that handed the transport over is still its producer.
            transport.unregisterProducer()
            transport.registerProducer(_ReadWhileDraining(transport), True)

    def onConnect(self, request: Any) -> str:
        return contract.WS_SUBPROTOCOL  # offered: WebSocketRoute checked it

    def onOpen(self) -> None:
        self._shed()
        self.factory.open_protocols.add(self)

    def _shed(self) -> None:
        """Drop the handshake's leftovers and every attribute that holds its class's value
        (a new, compact dict: deleting keys would not shrink the old one)."""
        cls = type(self)
        self.__dict__ = {
            name: value
            for name, value in vars(self).items()
            if name not in _HANDSHAKE_LEFTOVERS
            and not (hasattr(cls, name) and getattr(cls, name) is value)
        }

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        if self.state != self.STATE_OPEN:
            return  # we are already closing it
        message = payload if isBinary else payload.decode("utf-8")  # autobahn checked UTF-8
        close_code = take_message(self.factory.server_state, self.factory.sink, message)
        if close_code is not None:
            # sendClose() accepts only 1000 and 3000-4999; the contract's codes are 100x.
            self.sendCloseFrame(code=close_code, isReply=False)

    def onCloseFrame(self, code: int | None, reasonRaw: bytes | None) -> bool | None:
        if code is not None and not peer_close_code_valid(code) and self.state == self.STATE_OPEN:
            # autobahn sends its 1002 and then takes this frame for the answer to it,
            # resetting the connection before the 1002 leaves: send it, then close.
            self.failedByMe = True  # counted in bad by onClose
            self.sendCloseFrame(
                code=contract.WS_CLOSE_PROTOCOL_ERROR, reasonUtf8=b"invalid close code",
                isReply=False,
            )  # fmt: skip
            self.dropConnection(abort=False)
            return True
        return super().onCloseFrame(code, reasonRaw)

    def dropConnection(self, abort: bool = False) -> None:
        # autobahn resets the connection once a closing handshake completes cleanly, which
        # discards a close frame of ours still unsent: a close frame refused with 1002 (a
        # one-byte payload) or 1007 (a reason that is not UTF-8) is also taken for the
        # answer to that refusal, in the same read. Closed gracefully, the frame leaves
        # first. An unclean end (a closing-handshake timeout) still resets.
        super().dropConnection(abort=abort and not self.wasClean)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        if self.failedByMe:  # autobahn refused a frame: too big (1009), bad UTF-8, ...
            self.factory.server_state.bad += 1

    def connectionLost(self, reason: Any) -> None:
        super().connectionLost(reason)
        self.factory.open_protocols.discard(self)
        self.factory.server_state.connection_closed()  # it took over the HTTP channel

    def going_away(self) -> None:
        """Server shutdown: close with 1001."""
        self.sendCloseFrame(
            code=contract.WS_CLOSE_GOING_AWAY,
            reasonUtf8=WS_SHUTDOWN_REASON.encode(),
            isReply=False,
        )


class MessageFactory(WebSocketServerFactory):
    protocol = MessageProtocol

    def __init__(self, state: ServerState, sink: TwistedSink, reactor: Any) -> None:
        super().__init__(reactor=reactor)
        self.server_state = state
        self.sink = sink
        self.open_protocols: set[MessageProtocol] = set()
        self.setProtocolOptions(
            maxFramePayloadSize=contract.WS_MAX_MESSAGE_BYTES,
            maxMessagePayloadSize=contract.WS_MAX_MESSAGE_BYTES,
            failByDrop=False,  # send the close code (1009 ...) instead of dropping TCP
            webStatus=False,  # a plain GET /ws is refused, not answered with a status page
            openHandshakeTimeout=0,  # the handshake arrives whole from twisted.web
            autoPingInterval=0,
            perMessageCompressionAccept=_refuse_compression,
        )
        # This factory's protocol class carries the options autobahn copies into each
        # connection, the idle defaults and one TrafficStats (counted, never read here).
        # (a function among them, perMessageCompressionAccept, stays a plain function)
        shared: dict[str, Any] = {}
        for name in MessageProtocol.CONFIG_ATTRS:
            value = getattr(self, name)
            shared[name] = staticmethod(value) if isinstance(value, FunctionType) else value
        self.protocol = type(
            "MessageProtocol",
            (MessageProtocol,),
            {**shared, **_IDLE_DEFAULTS, "trafficStats": TrafficStats()},
        )


def _refuse_compression(offers: list[Any]) -> None:
    return None

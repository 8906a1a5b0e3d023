"""The wire contract as a Starlette app, for uvicorn (`app`) and Granian
(`app_without_counter`): `/`, `/counter`, `/log` with the three sinks, `/ws`, and the
boards' workloads (`/json`, `/plaintext`, `/delay/{ms}`, `/upload`, `/json-comp`,
`/body/10k`).

Written in Starlette's idiom; what must be identical to our servers is reused: the
counters and records (servers.core.state), the sinks (servers.runtimes.asyncio.sinks:
the file sink's batching on a worker thread, pymongo's async client), the body limit
(servers.core.body_limit), the WebSocket rules (servers.core.websocket,
servers.core.ws_messages) and the workloads' (servers.core.workloads). The server does
the HTTP parsing and the WebSocket framing (uvicorn: httptools and websockets' sans-I/O
protocol; Granian: hyper and tungstenite); one contract rule httptools does not keep is
kept here: headers over `MAX_HEADER_BYTES` are refused with 431 (httptools takes 200 kB
of them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from servers import contract
from servers.contenders.environment import options_from_environment
from servers.contenders.state import process_state
from servers.core import workloads
from servers.core.body_limit import (
    TOO_LARGE_BODY,
    TOO_LARGE_STATUS,
    BodyCounter,
    declared_too_large,
)
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.core.websocket import websocket_handshake_status
from servers.core.ws_messages import take_message
from servers.runtimes.asyncio.sinks import AsyncSink, open_async_sink

MAX_HEADER_BYTES = 64 * 1024  # aiohttp's and Node's order of magnitude
MAX_MESSAGE = contract.WS_MAX_MESSAGE_BYTES


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


LOG_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]
TEXT = contract.TEXT_CONTENT_TYPE
_sink: AsyncSink | None = None  # opened at startup (lifespan), on the server's own loop


def _plain(status: int, body: bytes, **headers: str) -> Response:
    return Response(body, status_code=status, media_type=TEXT, headers=headers or None)


def _too_large() -> Response:
    """413, then close: the rest of the body is not read."""
    return _plain(TOO_LARGE_STATUS, TOO_LARGE_BODY, connection="close")


async def text(request: Request) -> Response:
    return Response(contract.TEXT_BODY, media_type=TEXT)


async def counter(request: Request) -> Response:
    body = process_state().counter_payload()
    return Response(body, media_type=contract.JSON_CONTENT_TYPE)


async def log(request: Request) -> Response:
    declared = request.headers.get("content-length")
    if declared_too_large(int(declared) if declared is not None else None):
        return _too_large()  # unread
    chunks: list[bytes] = []
    counter = BodyCounter()
    async for chunk in request.stream():
        if not counter.take(len(chunk)):  # a chunked body past the limit
            return _too_large()
        chunks.append(chunk)
    state = process_state()
    record = state.request_record(
        request.method, request.url.path, dict(request.headers), b"".join(chunks)
    )
    assert _sink is not None
    try:
        await _sink.store_and_wait(record)
    except SinkUnavailable:
        return _plain(contract.UNAVAILABLE_STATUS, contract.SINK_UNAVAILABLE_BODY)
    return Response(contract.LOG_REPLY_BODY, media_type=TEXT)


async def json_route(request: Request) -> Response:
    return JSONResponse(contract.JSON_MESSAGE)  # serialized for this request


async def plaintext(request: Request) -> Response:
    return Response(contract.PLAINTEXT_BODY, media_type=TEXT)


async def body_10k(request: Request) -> Response:
    return Response(contract.BODY_10K, media_type=TEXT)


async def json_comp(request: Request) -> Response:
    gzipped = workloads.wants_gzip(request.headers.get("accept-encoding"))
    headers = {"Vary": "Accept-Encoding", **({"Content-Encoding": "gzip"} if gzipped else {})}
    body = workloads.json_comp_body(gzipped)
    return Response(body, media_type=contract.JSON_CONTENT_TYPE, headers=headers)


async def delay(request: Request) -> Response:
    delay_ms = workloads.delay_ms(request.path_params["ms"])
    if delay_ms is None:
        return _plain(contract.BAD_REQUEST_STATUS, workloads.DELAY_REFUSAL_BODY)
    await asyncio.sleep(delay_ms / 1000)  # the server's own loop's timer
    return Response(b"%d" % delay_ms, media_type=TEXT)


async def upload(request: Request) -> Response:
    """`POST /upload`: the body streamed in, counted and dropped; over the limit 413."""
    declared = request.headers.get("content-length")
    if workloads.upload_refusal(int(declared) if declared else None) is not None:
        return _too_large()  # unread
    counter = workloads.upload_counter()
    async for chunk in request.stream():
        if not counter.take(len(chunk)):  # a chunked body
            return _too_large()
    return Response(workloads.upload_reply(counter.received_bytes), media_type=TEXT)


WORKLOAD_ROUTES = [
    Route(contract.ROUTE_JSON, json_route, methods=["GET"]),
    Route(contract.ROUTE_PLAINTEXT, plaintext, methods=["GET"]),
    Route(contract.ROUTE_DELAY_PREFIX + "{ms}", delay, methods=["GET"]),
    Route(contract.ROUTE_UPLOAD, upload, methods=["POST"]),
    Route(contract.ROUTE_JSON_COMP, json_comp, methods=["GET"]),
    Route(contract.ROUTE_BODY_10K, body_10k, methods=["GET"]),
]


async def websocket(ws: WebSocket) -> None:
    state = process_state()
    state.connection_opened()
    try:
        refusal = websocket_handshake_status(
            ws.headers.get("origin"), ws.headers.get("sec-websocket-protocol")
        )
        if refusal is not None:
            if "websocket.http.response" in ws.scope.get("extensions", {}):
                await ws.send_denial_response(_plain(refusal, str(refusal).encode()))
            else:  # the server cannot send a status of our choosing: its own refusal
                await ws.close()
            return
        await ws.accept(subprotocol=contract.WS_SUBPROTOCOL)
        await _session(ws, state)
    finally:
        state.connection_closed()


async def _session(ws: WebSocket, state: ServerState) -> None:
    """Each message judged and stored (take_message) until one earns a close."""
    assert _sink is not None
    while True:
        try:
            message = await ws.receive()
        except WebSocketDisconnect:
            return
        if message["type"] == "websocket.disconnect":
            return
        data = message.get("text")
        if data is not None and len(data) > MAX_MESSAGE // 4 and _utf8_size(data) > MAX_MESSAGE:
            # Granian's WebSocket (tungstenite) takes messages up to 64 MiB and has no
            # option for less: the limit is judged here, on the whole message
            state.bad += 1
            close_code: int | None = contract.WS_CLOSE_TOO_BIG
        else:  # a binary message (bytes) earns its 1003 there
            binary = message.get("bytes") or b""
            close_code = take_message(state, _sink, data if data is not None else binary)
        if close_code is not None:
            await ws.close(close_code)
            return


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """The sink, opened on the server's loop; drained and closed at shutdown."""
    global _sink
    _sink = open_async_sink(options_from_environment(), process_state())
    try:
        yield
    finally:
        await _sink.aclose()


class CountRequests:
    """Counts every request and handshake (`requests`), and refuses oversized headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            process_state().requests += 1
            size = sum(len(name) + len(value) for name, value in scope["headers"])
            if size > MAX_HEADER_BYTES and scope["type"] == "http":
                await _plain(431, b"431: Request Header Fields Too Large", connection="close")(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


def make_app(with_counter: bool) -> ASGIApp:
    """The contract's routes; Starlette answers unknown paths 404 and wrong methods 405."""
    routes = [
        Route(contract.ROUTE_TEXT, text, methods=["GET"]),
        Route(contract.ROUTE_LOG, log, methods=LOG_METHODS),
        WebSocketRoute(contract.ROUTE_WEBSOCKET, websocket),
        *WORKLOAD_ROUTES,
    ]
    if with_counter:
        routes.append(Route(contract.ROUTE_COUNTER, counter, methods=["GET"]))
    return CountRequests(Starlette(routes=routes, lifespan=lifespan))


# uvicorn, with servers.contenders.uvicorn_protocol counting connections
app = make_app(with_counter=True)
# Granian: no hook sees a connection open or close, so no /counter (answered 404)
app_without_counter = make_app(with_counter=False)

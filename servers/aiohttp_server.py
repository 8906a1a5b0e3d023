"""The wire contract on aiohttp.web (asyncio or uvloop)."""

from __future__ import annotations

import asyncio
import signal
import socket
import weakref

from aiohttp import WSMsgType, web

from servers import common, contract
from servers.asyncio_sinks import AsyncSink, open_async_sink
from servers.common import ServerState, run_on_asyncio
from servers.contract import ServerOptions
from servers.sinks import SinkUnavailable


def make_app(state: ServerState, sink: AsyncSink) -> web.Application:
    """The contract's routes; aiohttp answers unknown paths 404 and wrong methods 405."""
    websockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()

    async def text(request: web.Request) -> web.Response:
        state.requests += 1
        return web.Response(body=contract.TEXT_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def counter(request: web.Request) -> web.Response:
        state.requests += 1
        return web.Response(body=state.counter_payload(), content_type=contract.JSON_CONTENT_TYPE)

    async def log(request: web.Request) -> web.Response:
        state.requests += 1
        body = (await request.read()).decode("utf-8", "replace")
        record = state.make_record(request.method, request.path, dict(request.headers), body)
        try:
            await sink.store_and_wait(record)
        except SinkUnavailable:
            return web.Response(status=503, text="sink unavailable")
        return web.Response(body=contract.LOG_REPLY_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def websocket(request: web.Request) -> web.StreamResponse:
        state.requests += 1
        refusal = common.websocket_handshake_status(
            request.headers.get("Origin"), request.headers.get("Sec-WebSocket-Protocol")
        )
        if refusal is not None:
            return web.Response(status=refusal, text=f"{refusal}")
        ws = web.WebSocketResponse(
            protocols=(contract.WS_SUBPROTOCOL,),
            max_msg_size=contract.WS_MAX_MESSAGE_BYTES,
            compress=False,
        )
        await ws.prepare(request)
        websockets.add(ws)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                close_code = common.websocket_close_code(message.data)
                if close_code is None:
                    state.messages += 1
                    sink.store(
                        state.make_record(
                            contract.WEBSOCKET_RECORD_METHOD,
                            contract.ROUTE_WEBSOCKET,
                            {},
                            message.data,
                        )
                    )
                    continue
            elif message.type == WSMsgType.BINARY:
                close_code = contract.WS_CLOSE_UNSUPPORTED_DATA
            else:  # ERROR: aiohttp already closed it (1009 for an oversized message)
                state.bad += 1
                break
            state.bad += 1
            await ws.close(code=close_code)
            break
        return ws

    async def close_websockets(app: web.Application) -> None:
        for ws in list(websockets):
            await ws.close(code=contract.WS_CLOSE_GOING_AWAY, message=b"server shutdown")

    app = web.Application()
    app.router.add_get(contract.ROUTE_TEXT, text)
    app.router.add_get(contract.ROUTE_COUNTER, counter)
    app.router.add_route("*", contract.ROUTE_LOG, log)
    app.router.add_get(contract.ROUTE_WEBSOCKET, websocket)
    app.on_shutdown.append(close_websockets)
    return app


async def _serve(options: ServerOptions, listener: socket.socket, state: ServerState) -> None:
    loop = asyncio.get_running_loop()
    sink = open_async_sink(options, state)
    runner = web.AppRunner(
        make_app(state, sink),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=contract.SHUTDOWN_GRACE_S / 2,
    )
    await runner.setup()
    server = runner.server
    assert server is not None
    made, lost = server.connection_made, server.connection_lost

    def connection_made(handler, transport) -> None:
        state.connection_opened()
        made(handler, transport)

    def connection_lost(handler, exc) -> None:
        state.connection_closed()
        lost(handler, exc)

    server.connection_made = connection_made  # type: ignore[method-assign]
    server.connection_lost = connection_lost  # type: ignore[method-assign]
    await web.SockSite(runner, listener).start()

    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)

    def tick() -> None:
        state.tick()
        loop.call_later(contract.TICK_INTERVAL_S, tick)

    def report() -> None:
        state.emit_telemetry()
        loop.call_later(contract.TELEMETRY_INTERVAL_S, report)

    tick()
    report()  # the first line says the port is listening
    await stopping.wait()
    await runner.cleanup()
    await sink.aclose()
    state.emit_telemetry()


def serve(options: ServerOptions, listener: socket.socket, state: ServerState) -> None:
    """Serve on `listener` until SIGTERM; then stop accepting, close, flush, return."""
    run_on_asyncio(options.loop, _serve(options, listener, state))

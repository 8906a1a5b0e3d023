"""The boards' workloads on aiohttp.web (docs/contract.md, "The boards' workloads"):
handlers on aiohttp's router, the wait on the loop's own timer, the upload read as a
stream from `request.content`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from servers import contract
from servers.core import workloads
from servers.core.state import ServerState

TEXT = contract.TEXT_CONTENT_TYPE
JSON = contract.JSON_CONTENT_TYPE


def add_workload_routes(
    app: web.Application,
    state: ServerState,
    body_timeout_s: float,
    too_large: Callable[[], web.Response],
    closed: Callable[[web.Request], web.Response],
) -> None:
    """Add the workload routes to `app`, after the studies' (`/` is matched first);
    `too_large` answers 413 and closes, `closed` closes at once
    (servers.frameworks.aiohttp.routes)."""

    async def json_route(request: web.Request) -> web.Response:
        state.requests += 1
        return web.Response(body=workloads.json_body(), content_type=JSON)

    async def plaintext(request: web.Request) -> web.Response:
        state.requests += 1
        return web.Response(body=contract.PLAINTEXT_BODY, content_type=TEXT)

    async def delay(request: web.Request) -> web.Response:
        state.requests += 1
        delay_ms = workloads.delay_ms(request.match_info["ms"])
        if delay_ms is None:
            refusal = workloads.DELAY_REFUSAL_BODY.decode()
            return web.Response(status=contract.BAD_REQUEST_STATUS, text=refusal)
        await asyncio.sleep(delay_ms / 1000)
        return web.Response(body=b"%d" % delay_ms, content_type=TEXT)

    async def upload(request: web.Request) -> web.Response:
        state.requests += 1
        if workloads.upload_refusal(request.content_length) is not None:
            return too_large()  # before any of the body is read
        counter = workloads.upload_counter()
        try:
            async with asyncio.timeout(body_timeout_s):
                async for chunk in request.content.iter_any():
                    if not counter.take(len(chunk)):  # a chunked body
                        return too_large()
        except TimeoutError:  # the body missed its deadline
            return closed(request)
        reply = workloads.upload_reply(counter.received_bytes)
        return web.Response(body=reply, content_type=TEXT)

    async def json_comp(request: web.Request) -> web.Response:
        state.requests += 1
        gzipped = workloads.wants_gzip(request.headers.get("Accept-Encoding"))
        response = web.Response(body=workloads.json_comp_body(gzipped), content_type=JSON)
        response.headers["Vary"] = "Accept-Encoding"
        if gzipped:
            response.headers["Content-Encoding"] = "gzip"
        return response

    async def body_10k(request: web.Request) -> web.Response:
        state.requests += 1
        return web.Response(body=contract.BODY_10K, content_type=TEXT)

    app.router.add_get(contract.ROUTE_JSON, json_route)
    app.router.add_get(contract.ROUTE_PLAINTEXT, plaintext)
    app.router.add_get(contract.ROUTE_DELAY_PREFIX + "{ms}", delay)
    app.router.add_post(contract.ROUTE_UPLOAD, upload)
    app.router.add_get(contract.ROUTE_JSON_COMP, json_comp)
    app.router.add_get(contract.ROUTE_BODY_10K, body_10k)

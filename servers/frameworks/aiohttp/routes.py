"""The contract's HTTP routes on aiohttp.web: `/`, `/counter`, `/log` (its body within the
contract's limit and deadline), and the backends' `/files`, `/gridfs`, `/mc`."""

from __future__ import annotations

import asyncio

from aiohttp import web

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.body_limit import TOO_LARGE_BODY, TOO_LARGE_STATUS, declared_too_large
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.runtimes.asyncio.backends import AsyncBackends
from servers.runtimes.asyncio.sinks import AsyncSink


def _not_found() -> web.Response:
    return web.Response(
        status=404, body=contract.NOT_FOUND_BODY, content_type=contract.TEXT_CONTENT_TYPE
    )


def _unavailable(error: BackendUnavailable) -> web.Response:
    return web.Response(
        status=contract.UNAVAILABLE_STATUS,
        body=contract.BACKEND_UNAVAILABLE_BODY,
        content_type=contract.TEXT_CONTENT_TYPE,
    )


def too_large() -> web.Response:
    """413, then close: the rest of the body is not read (aiohttp would linger on it)."""
    response = web.Response(
        # text=: aiohttp adds "; charset=utf-8", as it always did on this reply
        status=TOO_LARGE_STATUS,
        text=TOO_LARGE_BODY.decode(),
        content_type="text/plain",
    )
    response.force_close()
    return response


def closed(request: web.Request) -> web.Response:
    """Close the connection at once; the response returned is never sent (aiohttp finds
    the transport closing and stops), and the rest of the body is not lingered on."""
    transport = request.transport
    if transport is not None:
        transport.close()
    return web.Response(status=408)


class HttpRoutes:
    """The contract's HTTP handlers, sharing the process's state, sink and backends.

    `/log` reads its body within `body_timeout_s` of its handler starting (when the head
    arrived, unless earlier requests on the connection were still being answered) or
    closes the connection: the contract's body deadline.
    """

    def __init__(
        self, state: ServerState, sink: AsyncSink, backends: AsyncBackends, body_timeout_s: float
    ) -> None:
        self.state = state
        self.sink = sink
        self.backends = backends
        self.body_timeout_s = body_timeout_s

    async def text(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        return web.Response(body=contract.TEXT_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def counter(self, request: web.Request) -> web.Response:
        state = self.state
        state.requests += 1
        return web.Response(body=state.counter_payload(), content_type=contract.JSON_CONTENT_TYPE)

    async def log(self, request: web.Request) -> web.Response:
        state = self.state
        state.requests += 1
        if declared_too_large(request.content_length):
            # Before reading any of it: a declared 2 GiB that never comes is refused at
            # once (aiohttp's own check, in read(), waits for the bytes).
            return too_large()
        try:
            if request.content.is_eof():  # the whole body came with the head: no timer
                raw_body = await request.read()
            else:
                async with asyncio.timeout(self.body_timeout_s):
                    raw_body = await request.read()
        except web.HTTPRequestEntityTooLarge:  # a chunked body past client_max_size
            return too_large()
        except TimeoutError:  # the body missed its deadline: close, store nothing
            return closed(request)
        # Each header byte one character (ISO-8859-1), as on every other server: aiohttp's
        # own strings hold bytes that are not UTF-8 as surrogates, which no record can store.
        headers: dict[str, str] = {}
        for name, value in request.raw_headers:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        record = state.request_record(request.method, request.path, headers, raw_body)
        try:
            await self.sink.store_and_wait(record)
        except SinkUnavailable:
            return web.Response(
                status=contract.UNAVAILABLE_STATUS,
                body=contract.SINK_UNAVAILABLE_BODY,
                content_type=contract.TEXT_CONTENT_TYPE,
            )
        return web.Response(body=contract.LOG_REPLY_BODY, content_type=contract.TEXT_CONTENT_TYPE)

    async def files(self, request: web.Request) -> web.StreamResponse:
        self.state.requests += 1
        found = static.file_path(self.backends.files_dir, request.match_info["name"])
        if found is None:
            return _not_found()
        # aiohttp's own idiom: it opens the file on a worker thread and sends it with
        # loop.sendfile (asyncio) or reads it there in chunks (uvloop has no sendfile), so
        # no file blocks the loop. The thread hops cost: an 8.5 KB file measured 4,000
        # req per server CPU-second (asyncio and uvloop) against 10,000 when read on the
        # loop — but a plain read is not how aiohttp serves files, and this study compares
        # idioms. It also answers conditional and Range requests (304, 206) by itself.
        return web.FileResponse(found.path, headers={"Content-Type": found.content_type})

    async def gridfs(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        try:
            found = await self.backends.gridfs.read(request.match_info["name"])
        except BackendUnavailable as error:
            return _unavailable(error)
        if found is None:
            return _not_found()
        return web.Response(body=found.data, content_type=found.content_type)

    async def mc(self, request: web.Request) -> web.Response:
        self.state.requests += 1
        # The path as yarl decoded it; surrogatepass never raises, and a non-ASCII key
        # fails valid_key either way.
        key = request.match_info["key"].encode("utf-8", "surrogatepass")
        if not memcache.valid_key(key):
            return _not_found()
        try:
            value = await self.backends.memcached.get(key)
        except BackendUnavailable as error:
            return _unavailable(error)
        if value is None:
            return _not_found()
        return web.Response(body=value, content_type=contract.MC_CONTENT_TYPE)

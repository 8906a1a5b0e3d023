"""The contract's HTTP routes as tornado RequestHandlers: `/`, `/counter`, `/log` (its body
streamed in, within the contract's limit), and the backends' `/files`, `/gridfs`, `/mc`."""

from __future__ import annotations

import asyncio
from typing import Any

import tornado.web

from servers import contract
from servers.core import memcache, static
from servers.core.backends import BackendUnavailable
from servers.core.body_limit import (
    TOO_LARGE_BODY,
    TOO_LARGE_STATUS,
    BodyCounter,
    declared_too_large,
)
from servers.core.sinks import SinkUnavailable
from servers.core.state import ServerState
from servers.runtimes.asyncio.backends import AsyncBackends


class _ContractHandler(tornado.web.RequestHandler):
    """Base of the routes: the process's state and sink, and no ETag.

    Tornado hashes every GET body into an ETag and answers a matching If-None-Match with
    304; the contract's replies are not cacheable (a counter must never be a 304), and the
    hash is pure cost on the hot path.
    """

    def initialize(self, state: ServerState, sink: Any) -> None:
        self.state = state
        self.sink = sink

    def compute_etag(self) -> None:
        return None


class TextHandler(_ContractHandler):
    def get(self) -> None:
        self.state.requests += 1
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.TEXT_BODY)

    head = get  # as aiohttp's add_get: HEAD is answered by the GET handler


class CounterHandler(_ContractHandler):
    def get(self) -> None:
        self.state.requests += 1
        self.set_header("Content-Type", contract.JSON_CONTENT_TYPE)
        self.finish(self.state.counter_payload())

    head = get


@tornado.web.stream_request_body
class LogHandler(_ContractHandler):
    """`ANY /log`: every method tornado's handlers support stores one record.

    The body is streamed in so that the contract's limit holds as it arrives: a declared
    Content-Length over `contract.LOG_MAX_BODY_BYTES` is answered 413 before any of the
    body is read (then the connection is closed), a chunked body once it grows past it
    (finishing a request whose body is unread makes tornado close the connection).
    """

    def prepare(self) -> None:
        self.chunks: list[bytes] = []
        self.body_counter = BodyCounter()
        # Tornado judges the Content-Length only once this returns (two unequal ones are
        # joined here as "0,27": its 400 then); a single length is digits by now.
        declared = self.request.headers.get("Content-Length", "")
        if declared.isdigit() and declared_too_large(int(declared)):
            self.too_large()
            # Tornado would go on to read the body (or answer a second time, 400, past its
            # own 100 MiB limit): take the stream and close it once the 413 is out.
            stream = self.request.connection.detach()
            stream.write(b"").add_done_callback(lambda _: stream.close())

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        if not self.body_counter.take(len(chunk)):
            self.chunks.clear()
            self.too_large()
            return
        self.chunks.append(chunk)

    def too_large(self) -> None:
        self.state.requests += 1
        self.set_status(TOO_LARGE_STATUS)
        self.set_header("Connection", "close")
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(TOO_LARGE_BODY)

    async def store(self) -> None:
        request = self.request
        self.state.requests += 1
        body = b"".join(self.chunks)
        record = self.state.request_record(
            request.method or "", request.path, dict(request.headers), body
        )
        try:
            await self.sink.store_and_wait(record)
        except SinkUnavailable:
            self.set_status(contract.UNAVAILABLE_STATUS)
            self.finish(contract.SINK_UNAVAILABLE_BODY)
            return
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.LOG_REPLY_BODY)

    get = head = post = put = patch = delete = options = store  # type: ignore[assignment]


# A file up to this size is read on the loop: the file set is ≤ 64 KiB and page-cached, so
# open+read+close costs microseconds, less than a hop to a worker thread and back (tornado's
# StaticFileHandler reads on the loop too): an 8.5 KB file measured 4,300 req per server
# CPU-second against 5,350 for `/`. A larger file is read on the default executor.
INLINE_READ_MAX_BYTES = 256 * 1024


def _read_file(path: str) -> bytes:
    with open(path, "rb", buffering=0) as file:
        return file.readall()


class _BackendHandler(_ContractHandler):
    """Base of `/files`, `/gridfs` and `/mc`: the backends, and the contract's 404 and 503."""

    def initialize(self, state: ServerState, sink: Any, backends: AsyncBackends) -> None:
        super().initialize(state, sink)
        self.backends = backends

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        # Tornado answers a path that is not UTF-8 with 400; here it is a name no file has
        # (static.valid_name and memcache.valid_key refuse it), so 404 like every server.
        return value.decode("utf-8", "surrogateescape")

    def not_found(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.NOT_FOUND_BODY)

    def unavailable(self, error: BackendUnavailable) -> None:
        self.set_status(contract.UNAVAILABLE_STATUS)
        self.set_header("Content-Type", contract.TEXT_CONTENT_TYPE)
        self.finish(contract.BACKEND_UNAVAILABLE_BODY)


class FilesHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        found = static.file_path(self.backends.files_dir, name)
        if found is None:
            self.not_found()
            return
        try:
            if found.size_bytes <= INLINE_READ_MAX_BYTES:
                data = _read_file(found.path)
            else:
                loop = asyncio.get_running_loop()
                data = await loop.run_in_executor(None, _read_file, found.path)
        except OSError:  # removed since the stat
            self.not_found()
            return
        self.set_header("Content-Type", found.content_type)
        self.finish(data)

    head = get


class GridFSHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        try:
            found = await self.backends.gridfs.read(name)
        except BackendUnavailable as error:
            self.unavailable(error)
            return
        if found is None:
            self.not_found()
            return
        self.set_header("Content-Type", found.content_type)
        self.finish(found.data)

    head = get


class MemcachedHandler(_BackendHandler):
    async def get(self, name: str) -> None:
        self.state.requests += 1
        key = name.encode("utf-8", "surrogateescape")  # the path's bytes, as sent
        if not memcache.valid_key(key):
            self.not_found()
            return
        try:
            value = await self.backends.memcached.get(key)
        except BackendUnavailable as error:
            self.unavailable(error)
            return
        if value is None:
            self.not_found()
            return
        self.set_header("Content-Type", contract.MC_CONTENT_TYPE)
        self.finish(value)

    head = get

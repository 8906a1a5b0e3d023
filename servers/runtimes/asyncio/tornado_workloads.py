"""The boards' workloads on tornado.web (docs/contract.md, "The boards' workloads"):
RequestHandlers, the wait on tornado's own timer (`tornado.gen.sleep`), the upload
streamed in through `data_received` (`stream_request_body`)."""

from __future__ import annotations

from typing import Any

import tornado.gen
import tornado.web

from servers import contract
from servers.core import workloads
from servers.core.body_limit import TOO_LARGE_BODY, TOO_LARGE_STATUS
from servers.core.state import ServerState


class _WorkloadHandler(tornado.web.RequestHandler):
    """The process's state, and no ETag (tornado would hash every GET body for one)."""

    def initialize(self, state: ServerState, sink: Any = None) -> None:
        self.state = state

    def compute_etag(self) -> None:
        return None

    def reply(self, content_type: str, body: bytes) -> None:
        self.state.requests += 1
        self.set_header("Content-Type", content_type)
        self.finish(body)


class JsonHandler(_WorkloadHandler):
    def get(self) -> None:
        self.reply(contract.JSON_CONTENT_TYPE, workloads.json_body())


class PlaintextHandler(_WorkloadHandler):
    def get(self) -> None:
        self.reply(contract.TEXT_CONTENT_TYPE, contract.PLAINTEXT_BODY)


class Body10kHandler(_WorkloadHandler):
    def get(self) -> None:
        self.reply(contract.TEXT_CONTENT_TYPE, contract.BODY_10K)


class JsonCompHandler(_WorkloadHandler):
    def get(self) -> None:
        gzipped = workloads.wants_gzip(self.request.headers.get("Accept-Encoding"))
        self.set_header("Vary", "Accept-Encoding")
        if gzipped:
            self.set_header("Content-Encoding", "gzip")
        self.reply(contract.JSON_CONTENT_TYPE, workloads.json_comp_body(gzipped))


class DelayHandler(_WorkloadHandler):
    async def get(self, segment: str) -> None:
        delay_ms = workloads.delay_ms(segment)
        if delay_ms is None:
            self.set_status(contract.BAD_REQUEST_STATUS)
            self.reply(contract.TEXT_CONTENT_TYPE, workloads.DELAY_REFUSAL_BODY)
            return
        await tornado.gen.sleep(delay_ms / 1000)
        self.reply(contract.TEXT_CONTENT_TYPE, b"%d" % delay_ms)


@tornado.web.stream_request_body
class UploadHandler(_WorkloadHandler):
    """`POST /upload`: the body counted as it arrives, never kept; over the limit 413 and
    the connection closed (a declared length before any of the body is read)."""

    def prepare(self) -> None:
        self.body_counter = workloads.upload_counter()
        # a single length is digits by now (tornado judges it once this returns)
        declared = self.request.headers.get("Content-Length", "")
        if workloads.upload_refusal(int(declared) if declared.isdigit() else None):
            self.too_large()
            stream = self.request.connection.detach()  # tornado would read the body on
            if not stream.closed():  # closed already when the 413 went out at once
                stream.write(b"").add_done_callback(lambda _: stream.close())

    def data_received(self, chunk: bytes) -> None:
        if self._finished:
            return
        if not self.body_counter.take(len(chunk)):  # a chunked body
            self.too_large()

    def too_large(self) -> None:
        self.set_status(TOO_LARGE_STATUS)
        self.set_header("Connection", "close")
        self.reply(contract.TEXT_CONTENT_TYPE, TOO_LARGE_BODY)

    def post(self) -> None:
        if self._finished:  # refused 413 already
            return
        body_bytes = self.body_counter.received_bytes
        self.reply(contract.TEXT_CONTENT_TYPE, workloads.upload_reply(body_bytes))


def workload_handlers(context: dict[str, Any]) -> list[tuple[str, type, dict[str, Any]]]:
    """The workload routes for tornado.web.Application, after the studies' routes."""
    return [
        (contract.ROUTE_JSON, JsonHandler, context),
        (contract.ROUTE_PLAINTEXT, PlaintextHandler, context),
        (contract.ROUTE_DELAY_PREFIX + "([^/]*)", DelayHandler, context),
        (contract.ROUTE_UPLOAD, UploadHandler, context),
        (contract.ROUTE_JSON_COMP, JsonCompHandler, context),
        (contract.ROUTE_BODY_10K, Body10kHandler, context),
    ]

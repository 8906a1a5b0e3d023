"""The boards' workloads on twisted.web (docs/contract.md, "The boards' workloads"):
Resources in the site's tree, the wait on the reactor's own timer (`callLater`).

`/upload`: twisted.web hands a Resource the whole body (`request.content`, which
servers.frameworks.twisted.h1.ContractRequest keeps in memory within the contract's limit and
refuses past it, as it arrives): the count is its length. That is twisted.web's idiom;
it has no streaming body for a Resource.
"""

from __future__ import annotations

import io
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from servers import contract
from servers.core import workloads
from servers.core.state import ServerState

_TEXT = contract.TEXT_CONTENT_TYPE.encode()
_JSON = contract.JSON_CONTENT_TYPE.encode()


class _Workload(Resource):
    isLeaf = True

    def __init__(self, state: ServerState) -> None:
        super().__init__()
        self.state = state

    def reply(self, request: Request, content_type: bytes, body: bytes) -> bytes:
        self.state.requests += 1
        request.setHeader(b"content-type", content_type)
        return body


class JsonResource(_Workload):
    def render_GET(self, request: Request) -> bytes:
        return self.reply(request, _JSON, workloads.json_body())


class PlaintextResource(_Workload):
    def render_GET(self, request: Request) -> bytes:
        return self.reply(request, _TEXT, contract.PLAINTEXT_BODY)


class Body10kResource(_Workload):
    def render_GET(self, request: Request) -> bytes:
        return self.reply(request, _TEXT, contract.BODY_10K)


class JsonCompResource(_Workload):
    def render_GET(self, request: Request) -> bytes:
        gzipped = workloads.wants_gzip(_header(request, b"accept-encoding"))
        request.setHeader(b"vary", b"Accept-Encoding")
        if gzipped:
            request.setHeader(b"content-encoding", b"gzip")
        return self.reply(request, _JSON, workloads.json_comp_body(gzipped))


class UploadResource(_Workload):
    def render_POST(self, request: Request) -> bytes:
        body_bytes = request.content.seek(0, io.SEEK_END)
        return self.reply(request, _TEXT, workloads.upload_reply(body_bytes))


class DelayResource(_Workload):
    """`GET /delay/{ms}`: answered from a reactor timer, cancelled if the client leaves."""

    def __init__(self, state: ServerState, reactor: Any) -> None:
        super().__init__(state)
        self.reactor = reactor

    def render_GET(self, request: Request) -> bytes | int:
        segments = request.postpath
        delay_ms = workloads.delay_ms(segments[0].decode("latin-1")) if len(segments) == 1 else None
        if delay_ms is None:
            request.setResponseCode(contract.BAD_REQUEST_STATUS)
            return self.reply(request, _TEXT, workloads.DELAY_REFUSAL_BODY)
        timer = self.reactor.callLater(delay_ms / 1000, self._answer, request, delay_ms)
        request.notifyFinish().addErrback(lambda _: timer.active() and timer.cancel())
        return NOT_DONE_YET

    def _answer(self, request: Request, delay_ms: int) -> None:
        if request._disconnected:
            return
        body = self.reply(request, _TEXT, b"%d" % delay_ms)
        request.setHeader(b"content-length", b"%d" % len(body))
        request.write(body)
        request.finish()


class _NotFound(Resource):
    """A path segment that is only a prefix (`/body`): 404 as any unknown path."""

    def render(self, request: Request) -> bytes:
        request.setResponseCode(404)
        request.setHeader(b"content-type", _TEXT)
        return contract.NOT_FOUND_BODY


def _header(request: Request, name: bytes) -> str | None:
    values = request.requestHeaders.getRawHeaders(name)
    return b",".join(values).decode("latin-1") if values else None


def add_workload_routes(root: Resource, state: ServerState, reactor: Any) -> None:
    """Put the workload routes into the site's tree (beside the studies' routes)."""
    for route, resource in (
        (contract.ROUTE_JSON, JsonResource(state)),
        (contract.ROUTE_PLAINTEXT, PlaintextResource(state)),
        (contract.ROUTE_DELAY_PREFIX, DelayResource(state, reactor)),
        (contract.ROUTE_UPLOAD, UploadResource(state)),
        (contract.ROUTE_JSON_COMP, JsonCompResource(state)),
    ):
        root.putChild(route.strip("/").encode(), resource)
    parent, leaf = contract.ROUTE_BODY_10K.strip("/").encode().split(b"/")
    branch = _NotFound()
    branch.putChild(leaf, Body10kResource(state))
    root.putChild(parent, branch)

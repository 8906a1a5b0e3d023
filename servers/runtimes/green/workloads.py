"""The boards' workloads in the green servers' WSGI app (docs/contract.md, "The boards'
workloads"), for gevent and eventlet: the wait on the green `time.sleep` (monkey-patched:
it parks this green thread only), the upload read from `wsgi.input` in pieces, counted and
dropped, within the body deadline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from servers import contract
from servers.core import workloads
from servers.core.body_limit import TOO_LARGE_STATUS
from servers.runtimes.green.deadlines import ClientTimeout
from servers.runtimes.green.interfaces import Environ, Routes, StartResponse

UPLOAD_READ_BYTES = 64 * 1024
_OK = "200 OK"


class BodyDeadlines(Protocol):
    """A connection's body deadline (servers.runtimes.green.deadlines.ClientDeadlines)."""

    def await_body(self) -> None: ...

    def server_busy(self) -> None: ...


def workload_routes(
    state: Any,
    deadlines: Callable[[Environ], BodyDeadlines],
    headers: Callable[[str, bytes], list[tuple[str, str]]],
    plain: Callable[[StartResponse, int], Iterable[bytes]],
    refuse: Callable[[Environ, StartResponse, int], Iterable[bytes]],
) -> tuple[Routes, Routes]:
    """The workload routes (exact ones, prefix ones) as GreenApp's route tables hold them:
    `state` counts their requests, `deadlines` is a request's body deadline, `headers` a
    reply's header list, `plain` an error answer (its default body), `refuse` one that closes."""

    def answer(
        start_response: StartResponse, content_type: str, body: bytes, *extra: tuple[str, str]
    ) -> Iterable[bytes]:
        reply_headers = headers(content_type, body)
        reply_headers.extend(extra)
        start_response(_OK, reply_headers)
        return (body,)

    def json_route(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        return answer(start_response, contract.JSON_CONTENT_TYPE, workloads.json_body())

    def plaintext(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        return answer(start_response, contract.TEXT_CONTENT_TYPE, contract.PLAINTEXT_BODY)

    def body_10k(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        return answer(start_response, contract.TEXT_CONTENT_TYPE, contract.BODY_10K)

    def json_comp(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        gzipped = workloads.wants_gzip(environ.get("HTTP_ACCEPT_ENCODING"))
        body = workloads.json_comp_body(gzipped)
        extra = (workloads.VARY, *((("Content-Encoding", "gzip"),) if gzipped else ()))
        return answer(start_response, contract.JSON_CONTENT_TYPE, body, *extra)

    delay_start = len(contract.ROUTE_DELAY_PREFIX)

    def delay(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        delay_ms = workloads.delay_ms(environ["PATH_INFO"][delay_start:])
        if delay_ms is None:
            # error_replies' body for 400: workloads.DELAY_REFUSAL_BODY
            return plain(start_response, contract.BAD_REQUEST_STATUS)
        time.sleep(delay_ms / 1000)  # green: this request's thread only
        return answer(start_response, contract.TEXT_CONTENT_TYPE, b"%d" % delay_ms)

    def upload(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        state.requests += 1
        declared = environ.get("CONTENT_LENGTH")
        length = int(declared) if declared else None  # digits: framing_error checked
        refusal = workloads.upload_refusal(length)
        if refusal is not None:
            return refuse(environ, start_response, refusal)  # at once, nothing read
        body_bytes, refusal = _read_counted(environ, deadlines(environ))
        if refusal is not None:
            return refuse(environ, start_response, refusal)
        if length is not None and body_bytes < length:  # eventlet: what came before EOF
            return refuse(environ, start_response, 400)
        reply = workloads.upload_reply(body_bytes)
        return answer(start_response, contract.TEXT_CONTENT_TYPE, reply)

    exact: Routes = {
        contract.ROUTE_JSON: {"GET": json_route},
        contract.ROUTE_PLAINTEXT: {"GET": plaintext},
        contract.ROUTE_UPLOAD: {"POST": upload},
        contract.ROUTE_JSON_COMP: {"GET": json_comp},
        contract.ROUTE_BODY_10K: {"GET": body_10k},
    }
    return exact, {contract.ROUTE_DELAY_PREFIX: {"GET": delay}}


def _read_counted(environ: Environ, deadlines: BodyDeadlines) -> tuple[int, int | None]:
    """The body's byte count, read in pieces and dropped within the body deadline, and the
    status refusing it (413 over the limit, 408 late, 400 cut short or ill-framed) or None."""
    request_body = environ["wsgi.input"]
    counter = workloads.upload_counter()
    deadlines.await_body()
    try:
        while chunk := request_body.read(UPLOAD_READ_BYTES):
            if not counter.take(len(chunk)):  # a chunked body
                return counter.received_bytes, TOO_LARGE_STATUS
    except ClientTimeout:  # before OSError: it is one
        return counter.received_bytes, 408
    except (OSError, ValueError):  # the body ended early, or bad chunked framing
        return counter.received_bytes, contract.BAD_REQUEST_STATUS
    finally:
        deadlines.server_busy()
    return counter.received_bytes, None

"""The boards' workloads' checks (docs/contract.md, "The boards' workloads"): `/json`
parsed and compared, `/plaintext` and its pipelined replies counted and in order, `/delay`
never early and not serialised, `/upload` counts exact under both framings (a short body
and an over-long one refused), `/json-comp` decoding to the same document, `/body/10k`.

The pipelining and upload framing checks write raw HTTP/1.1 (`PIPELINED`, chunked and
short bodies): over HTTP/2 they are `not supported` (`NOT_OVER_H2`).
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip
import json
import socket
import threading
import time

import httpx

from harness.verify.endpoint import CheckFunction, EndpointOrUrl, http_client, open_connection
from harness.verify.failure import excerpt, expect, expect_status
from harness.verify.wire import PEER_CLOSED, reply_text, status_of, wait_for_close
from servers import contract

DELAY_CHECK_MS = 300
DELAY_PARALLEL = 4  # requests waiting at once: a server that blocks answers them in turn
BAD_DELAYS = (f"{contract.DELAY_MAX_MS + 1}", "abc", "-5")
UPLOAD_CHUNK_BYTES = 10_000  # the chunked upload's chunk size (the last one shorter)
SHORT_BODY_WAIT_S = 5.0


def _expect_headers(response: httpx.Response, sent: str, content_type: str) -> None:
    """Content-Type, and TechEmpower's Server and Date headers."""
    got = response.headers.get("content-type", "")
    expect(
        got.startswith(content_type),
        sent=sent,
        expected=f"Content-Type {content_type}",
        came=f"Content-Type {excerpt(got)}",
    )
    date = response.headers.get("date")
    expect(
        bool(response.headers.get("server"))
        and date is not None
        and email.utils.parsedate_tz(date) is not None,
        sent=sent,
        expected="a Server header and a Date header in HTTP-date form",
        came=f"Server {response.headers.get('server')!r}, Date {date!r}",
    )


def check_json_route(server: EndpointOrUrl) -> str:
    """`GET /json` twice on one connection: the message parsed and compared, the headers."""
    sent = "GET /json (twice on one kept-alive connection)"
    with http_client(server) as client:
        for _ in range(2):
            response = client.get(contract.ROUTE_JSON)
            expect_status(response.status_code, sent=sent)
            _expect_headers(response, sent, contract.JSON_CONTENT_TYPE)
            try:
                message = json.loads(response.content)
            except ValueError:
                message = None
            expect(
                message == contract.JSON_MESSAGE,
                sent=sent,
                expected=f"the JSON {json.dumps(contract.JSON_MESSAGE)}",
                came=f"the body {excerpt(response.content)}",
            )
    return f"200, {len(response.content)} bytes of JSON, Server: {response.headers['server']}"


def _expect_body(server: EndpointOrUrl, path: str, body: bytes) -> str:
    sent = f"GET {path}"
    with http_client(server) as client:
        response = client.get(path)
    expect_status(response.status_code, sent=sent)
    _expect_headers(response, sent, contract.TEXT_CONTENT_TYPE)
    expect(
        response.content == body,
        sent=sent,
        expected=f"the body {excerpt(body)}",
        came=f"the body {excerpt(response.content)}",
    )
    return f"200, {len(body)} bytes"


def check_plaintext_route(server: EndpointOrUrl) -> str:
    """`GET /plaintext`: TechEmpower's body and headers."""
    return _expect_body(server, contract.ROUTE_PLAINTEXT, contract.PLAINTEXT_BODY)


def check_body_10k_route(server: EndpointOrUrl) -> str:
    """`GET /body/10k`: the contract's 10 KB body, byte for byte."""
    return _expect_body(server, contract.ROUTE_BODY_10K, contract.BODY_10K)


# -- pipelining -----------------------------------------------------------------------------
def _read_response(sock: socket.socket, buffer: bytes) -> tuple[int | None, bytes, bytes]:
    """One HTTP/1.1 response from `buffer` and `sock`: status, body (Content-Length or
    chunked), and what follows it."""
    while b"\r\n\r\n" not in buffer:
        buffer += _recv(sock, buffer)
    head, _, rest = buffer.partition(b"\r\n\r\n")
    fields = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
    }
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        body = b""
        while True:
            while b"\r\n" not in rest:
                rest += _recv(sock, rest)
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                rest += _recv(sock, rest)
            body, rest = body + rest[:size], rest[size + 2 :]
            if size == 0:  # no trailers are sent by the servers here
                return status_of(head), body, rest
    length = int(fields.get(b"content-length", b"0"))
    while len(rest) < length:
        rest += _recv(sock, rest)
    return status_of(head), rest[:length], rest[length:]


def _recv(sock: socket.socket, so_far: bytes) -> bytes:
    chunk = sock.recv(65536)
    expect(
        bool(chunk),
        sent="pipelined requests",
        expected="every response",
        came=f"a close after {excerpt(so_far)}",
    )
    return chunk


def check_pipelined(server: EndpointOrUrl) -> str:
    """PIPELINE_DEPTH requests in one write, `/plaintext` and `/json` alternating: as many
    responses, each the answer to its own request, in order (RFC 9112 §9.3.2)."""
    paths = [
        contract.ROUTE_PLAINTEXT if i % 2 == 0 else contract.ROUTE_JSON
        for i in range(contract.PIPELINE_DEPTH)
    ]
    batch = b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for p in paths)
    sent = f"{contract.PIPELINE_DEPTH} GETs in one write (/plaintext and /json alternating)"
    with open_connection(server) as sock:
        sock.sendall(batch)
        buffer = b""
        for index, path in enumerate(paths):
            status, body, buffer = _read_response(sock, buffer)
            wanted_json = path == contract.ROUTE_JSON
            right = (
                json.loads(body) == contract.JSON_MESSAGE
                if wanted_json and body.startswith(b"{")
                else body == contract.PLAINTEXT_BODY
            )
            expect(
                status == 200 and right,
                sent=sent,
                expected=f"response {index + 1} to be {path}'s, 200",
                came=f"status {status}, body {excerpt(body)}",
            )
    return f"{len(paths)} responses, in order"


# -- delay ----------------------------------------------------------------------------------
def _timed_get(
    server: EndpointOrUrl,
    path: str,
    barrier: threading.Barrier,
    results: list[tuple[int, bytes, float, float]],
) -> None:
    """GET `path` once every thread's connection is open: status, body, sent and answered
    (monotonic seconds)."""
    try:
        with http_client(server, timeout_s=10.0) as client:
            client.get(contract.ROUTE_TEXT)  # the connection opened outside the timing
            barrier.wait(timeout=10.0)
            started = time.monotonic()
            response = client.get(path)
            results.append((response.status_code, response.content, started, time.monotonic()))
    except (httpx.HTTPError, threading.BrokenBarrierError, OSError):
        barrier.abort()  # the others stop waiting; the missing answer fails the check


def check_delay_route(server: EndpointOrUrl) -> str:
    """`GET /delay/{ms}`: never early (elapsed ≥ ms); DELAY_PARALLEL waits sent at once on
    open connections answered together, not one after another (a blocking sleep spaces the
    answers `ms` apart: (DELAY_PARALLEL - 1) × ms from first to last); a bad ms is 400."""
    path = f"{contract.ROUTE_DELAY_PREFIX}{DELAY_CHECK_MS}"
    results: list[tuple[int, bytes, float, float]] = []
    barrier = threading.Barrier(DELAY_PARALLEL)
    threads = [
        threading.Thread(target=_timed_get, args=(server, path, barrier, results))
        for _ in range(DELAY_PARALLEL)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent = f"{DELAY_PARALLEL} GET {path} at once, each on its own open connection"
    expect(
        len(results) == DELAY_PARALLEL,
        sent=sent,
        expected=f"{DELAY_PARALLEL} answers",
        came=f"{len(results)} answers (the others failed, or never had their connection)",
    )
    for status, body, started, answered in results:
        expect(
            status == 200 and body == str(DELAY_CHECK_MS).encode(),
            sent=sent,
            expected=f"200 with the body {DELAY_CHECK_MS!s}",
            came=f"{status} with the body {excerpt(body)}",
        )
        expect(
            (answered - started) * 1000 >= DELAY_CHECK_MS,
            sent=sent,
            expected=f"no answer before {DELAY_CHECK_MS} ms",
            came=f"an answer after {(answered - started) * 1000:.1f} ms",
        )
    spread_ms = (max(r[3] for r in results) - min(r[3] for r in results)) * 1000
    serial_ms = (DELAY_PARALLEL - 1) * DELAY_CHECK_MS
    expect(
        spread_ms < serial_ms / 2,
        sent=sent,
        expected=f"the answers together (a blocking wait spaces them {serial_ms} ms apart)",
        came=f"{spread_ms:.0f} ms from the first answer to the last",
    )
    with http_client(server) as client:
        for bad in BAD_DELAYS:
            status = client.get(contract.ROUTE_DELAY_PREFIX + bad).status_code
            expect(
                status == contract.BAD_REQUEST_STATUS,
                sent=f"GET {contract.ROUTE_DELAY_PREFIX}{bad}",
                expected=f"status {contract.BAD_REQUEST_STATUS}",
                came=f"status {status}",
            )
    slowest_ms = max(r[3] - r[2] for r in results) * 1000
    waits = f"{DELAY_PARALLEL} × {DELAY_CHECK_MS} ms"
    return f"{waits} answered within {spread_ms:.0f} ms (slowest {slowest_ms:.0f} ms), bad ms 400"


# -- upload ---------------------------------------------------------------------------------
def _upload_head(length: int | None) -> bytes:
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    return (
        f"POST {contract.ROUTE_UPLOAD} HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/octet-stream\r\n{framing}\r\n\r\n"
    ).encode()


def _chunked(body: bytes) -> bytes:
    pieces = [body[i : i + UPLOAD_CHUNK_BYTES] for i in range(0, len(body), UPLOAD_CHUNK_BYTES)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _upload(server: EndpointOrUrl, size: int, chunked: bool) -> tuple[int | None, bytes]:
    body = b"u" * size
    request = _upload_head(None if chunked else size) + (_chunked(body) if chunked else body)
    with open_connection(server, timeout_s=10.0) as sock:
        with contextlib.suppress(*PEER_CLOSED):  # refused before all of it went
            sock.sendall(request)
        status, reply, _ = _read_response(sock, b"")
    return status, reply


def check_upload_route(server: EndpointOrUrl) -> str:
    """`POST /upload`: each default size with Content-Length and chunked, answered with its
    exact byte count; one byte over the limit 413 (both framings); a body shorter than its
    Content-Length (the client stops sending) never answered with a count."""
    for size in contract.UPLOAD_SIZES_BYTES:
        for chunked in (False, True):
            framing = "chunked" if chunked else "with Content-Length"
            status, reply = _upload(server, size, chunked)
            expect(
                status == 200 and reply == str(size).encode(),
                sent=f"POST /upload of {size} bytes {framing}",
                expected=f"200 with the body {size}",
                came=f"{status} with the body {excerpt(reply)}",
            )
    over = contract.UPLOAD_MAX_BODY_BYTES + 1
    for chunked in (False, True):
        framing = "chunked" if chunked else "with Content-Length"
        status, reply = _upload(server, over, chunked)
        expect(
            status == 413,
            sent=f"POST /upload of {over} bytes {framing} (over the limit)",
            expected="413",
            came=f"{status} with the body {excerpt(reply)}",
        )
    declared, given = 1000, 500
    with open_connection(server, timeout_s=SHORT_BODY_WAIT_S) as sock:
        sock.sendall(_upload_head(declared) + b"u" * given)
        sock.shutdown(socket.SHUT_WR)  # the rest never comes
        reply, _ = wait_for_close(sock, SHORT_BODY_WAIT_S)
    status = status_of(reply)
    expect(
        status is None or status >= 400,
        sent=f"POST /upload declaring {declared} bytes, {given} sent, then the write side shut",
        expected="no count: the connection closed, or a 4xx",
        came=reply_text(reply),
    )
    sizes = " and ".join(str(s) for s in contract.UPLOAD_SIZES_BYTES)
    return f"{sizes} bytes counted (both framings), {over} refused 413, a short body refused"


# -- json-comp ------------------------------------------------------------------------------
def check_json_comp_route(server: EndpointOrUrl) -> str:
    """`GET /json-comp` with `Accept-Encoding: gzip` (gzip, decoding to the document) and
    with `identity` (the document as it is); `Vary: Accept-Encoding` on both."""
    sizes = {}
    with http_client(server) as client:
        for coding in ("gzip", "identity"):
            sent = f"GET /json-comp with Accept-Encoding: {coding}"
            with client.stream(
                "GET", contract.ROUTE_JSON_COMP, headers={"Accept-Encoding": coding}
            ) as response:
                raw = b"".join(response.iter_raw())
            expect_status(response.status_code, sent=sent)
            _expect_headers(response, sent, contract.JSON_CONTENT_TYPE)
            encoding = response.headers.get("content-encoding", "identity").lower()
            vary = response.headers.get("vary", "").lower()
            expect(
                encoding == coding and "accept-encoding" in vary,
                sent=sent,
                expected=f"Content-Encoding {coding} and Vary: Accept-Encoding",
                came=f"Content-Encoding {encoding}, Vary {vary!r}",
            )
            try:
                document = json.loads(gzip.decompress(raw) if coding == "gzip" else raw)
            except (OSError, ValueError, EOFError):
                document = None
            expect(
                document == contract.JSON_COMP_DOCUMENT,
                sent=sent,
                expected=f"the contract's document ({coding})",
                came=f"{len(raw)} bytes that are not it: {excerpt(raw)}",
            )
            sizes[coding] = len(raw)
    return f"gzip {sizes['gzip']} bytes, identity {sizes['identity']} bytes, same document"


WORKLOAD_CHECKS: dict[str, CheckFunction] = {
    "json": check_json_route,
    "plaintext": check_plaintext_route,
    "pipelined": check_pipelined,
    "delay": check_delay_route,
    "upload": check_upload_route,
    "json-comp": check_json_comp_route,
    "body-10k": check_body_10k_route,
}
# The route each check needs, and judges (harness.verify.CHECK_ROUTES, ANSWER_CHECK_ROUTES).
WORKLOAD_CHECK_ROUTES: dict[str, str] = {
    "json": contract.ROUTE_JSON,
    "plaintext": contract.ROUTE_PLAINTEXT,
    "pipelined": contract.ROUTE_PLAINTEXT,
    "delay": contract.ROUTE_DELAY_PREFIX,
    "upload": contract.ROUTE_UPLOAD,
    "json-comp": contract.ROUTE_JSON_COMP,
    "body-10k": contract.ROUTE_BODY_10K,
}
NOT_OVER_H2: dict[str, str] = {
    "pipelined": "HTTP/1.1 pipelining; HTTP/2 multiplexes streams instead",
    "upload": "HTTP/1.1 framing (chunked, a short Content-Length)",
}

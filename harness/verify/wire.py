"""Raw bytes to a server and back: what the checks send that no client library would.

Every helper here reads a reply as bytes, exactly as the server wrote it, so a check can
judge a status line, a second response on one connection, or a leaked file. Each opens
its connection through the one factory (`open_connection`), so the same helper speaks
cleartext or TLS; over HTTP/2 (h2, h2c) a raw GET is a stream of its own (h2wire).
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import time

from harness.verify.endpoint import EndpointOrUrl, endpoint_of, open_connection
from harness.verify.failure import excerpt, expect
from harness.verify.h2wire import h2_exchange
from servers import contract

# Planted beside the files directory (harness.verify.files.plant_escape_bait): no reply to
# a raw GET may contain it, whichever route it asked for.
ESCAPE_BAIT = b"outside the files directory"
STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5][0-9][0-9] ")
# The peer ended the connection: a reset, or over TLS a close without close_notify (the
# TLS form of the same refusal a cleartext server gives by closing)
PEER_CLOSED = (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


def address(target: EndpointOrUrl) -> tuple[str, int]:
    """The host and port of the server."""
    endpoint = endpoint_of(target)
    return endpoint.host, endpoint.port


def port_of(target: EndpointOrUrl) -> int:
    """The port of the server."""
    return endpoint_of(target).port


def read_until_close(sock: socket.socket) -> bytes:
    """Everything `sock` receives until the peer closes, resets, or its timeout passes."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, *PEER_CLOSED):
        pass
    return data


def wait_for_close(sock: socket.socket, wait_s: float) -> tuple[bytes, float | None]:
    """What `sock` receives until the peer closes (or resets) it, and the seconds that took
    (None: still open after `wait_s`)."""
    started = time.monotonic()
    deadline = started + wait_s
    data = b""
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except PEER_CLOSED:
            return data, time.monotonic() - started
        if not chunk:
            return data, time.monotonic() - started
        data += chunk
    return data, None


def read_until(sock: socket.socket, ending: bytes, count: int = 1, sent: str = "") -> bytes:
    """What `sock` receives until `ending` has come `count` times (a close fails the check;
    `sent` says what the reply answers)."""
    data = b""
    while data.count(ending) < count:
        chunk = sock.recv(65536)
        expect(
            bool(chunk),
            sent=sent or "a request",
            expected=f"a reply ending {ending!r}" + (f" ({count} of them)" if count > 1 else ""),
            came=f"a close after {excerpt(data)}",
        )
        data += chunk
    return data


def raw_exchange(target: EndpointOrUrl, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes (no client-side normalisation), read until the reply head is in."""
    with open_connection(target, timeout_s) as sock:
        sock.sendall(request)
        data = b""
        try:
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
        except (TimeoutError, *PEER_CLOSED):
            pass
    return data


def exchange_until_close(target: EndpointOrUrl, request: bytes, quiet_s: float) -> bytes:
    """Send raw bytes; read everything until the server closes or stays quiet `quiet_s`."""
    with open_connection(target, 5.0) as sock:
        with contextlib.suppress(*PEER_CLOSED):  # closed before all of it went: refused
            sock.sendall(request)
        sock.settimeout(quiet_s)
        return read_until_close(sock)


def status_of(reply: bytes) -> int | None:
    """The status of a raw HTTP/1.x reply (None: not one)."""
    parts = reply.split(b"\r\n", 1)[0].split(b" ", 2)
    return int(parts[1]) if reply.startswith(b"HTTP/1.") and parts[1:2] != [b""] else None


def responses(reply: bytes) -> int:
    """How many responses a reply holds: its status lines, wherever a body ended."""
    return len(STATUS_LINE.findall(reply))


def reply_text(reply: bytes) -> str:
    """What came back, in words: the status of each response (`200 OK`), or that nothing
    came, or the first bytes of a reply that is no HTTP response."""
    if not reply:
        return "no reply (the connection closed or stayed silent)"
    heads = [reply[m.start() :].split(b"\r\n", 1)[0] for m in STATUS_LINE.finditer(reply)]
    said = [head.decode("latin-1").split(" ", 1)[1][:40] for head in heads]
    if not said:
        first = reply.split(b"\r\n", 1)[0][:40].decode("latin-1")
        return f"no HTTP response (it began {first!r})"
    if len(said) == 1:
        return f"{said[0]} (one response)"
    return f"{len(said)} responses on one connection ({', '.join(said)})"


def raw_get(target: EndpointOrUrl, path: str, timeout_s: float = 5.0) -> bytes:
    """The whole reply to a raw `GET path` (exactly as written), read until the close."""
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    with open_connection(target, timeout_s) as sock:
        sock.sendall(request)
        return read_until_close(sock)


def get_status(target: EndpointOrUrl, path: str) -> int | None:
    """The status of a raw `GET path` (over HTTP/2: on a stream of a new connection); a
    reply that leaks `ESCAPE_BAIT` fails the check."""
    if endpoint_of(target).h2:
        response = h2_exchange(target, "GET", path)
        _expect_no_bait(path, response.body)
        return response.status
    reply = raw_get(target, path)
    _expect_no_bait(path, reply)
    return status_of(reply)


def _expect_no_bait(path: str, reply: bytes) -> None:
    at = reply.find(ESCAPE_BAIT)
    expect(
        at < 0,
        sent=f"GET {path}",
        expected="no reply holding the file planted outside the files directory",
        came=f"a reply holding it ({excerpt(reply[max(at - 20, 0) :])})",
    )


def expect_still_serving(target: EndpointOrUrl, after: str) -> None:
    """`GET /` on a new connection is answered 200 with the contract's body (`after`: what
    was sent before, for the failure's line)."""
    sent = f"GET / on a new connection after {after}"
    expected = f"200 with the contract's body {contract.TEXT_BODY!r}: still serving"
    if endpoint_of(target).h2:
        response = h2_exchange(target, "GET", contract.ROUTE_TEXT)
        expect(
            response.status == 200 and response.body == contract.TEXT_BODY,
            sent=sent,
            expected=expected,
            came=f"status {response.status}, body {excerpt(response.body)}",
        )
        return
    reply = raw_get(target, contract.ROUTE_TEXT)
    body = reply.partition(b"\r\n\r\n")[2]
    expect(
        status_of(reply) == 200 and reply.endswith(b"\r\n\r\n" + contract.TEXT_BODY),
        sent=sent,
        expected=expected,
        came=f"{reply_text(reply)}, body {excerpt(body)}" if reply else reply_text(reply),
    )

"""Raw bytes to a server and back: what the checks send that no client library would.

Every helper here reads a reply as bytes, exactly as the server wrote it, so a check can
judge a status line, a second response on one connection, or a leaked file.
"""

from __future__ import annotations

import re
import socket

import httpx

from harness.verify.failure import expect
from servers import contract

# Planted beside the files directory (harness.verify.files.plant_escape_bait): no reply to
# a raw GET may contain it, whichever route it asked for.
ESCAPE_BAIT = b"outside the files directory"
STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5][0-9][0-9] ")


def address(base_url: str) -> tuple[str, int]:
    """The host and port of `base_url`."""
    url = httpx.URL(base_url)
    return url.host, url.port or 80


def port_of(base_url: str) -> int:
    """The port of `base_url`."""
    return int(base_url.rsplit(":", 1)[1].split("/", 1)[0])


def read_until_close(sock: socket.socket) -> bytes:
    """Everything `sock` receives until the peer closes, resets, or its timeout passes."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def read_until(sock: socket.socket, ending: bytes, count: int = 1) -> bytes:
    """What `sock` receives until `ending` has come `count` times (a close fails the check)."""
    data = b""
    while data.count(ending) < count:
        chunk = sock.recv(65536)
        expect(bool(chunk), f"closed after {data[:60]!r}")
        data += chunk
    return data


def raw_exchange(base_url: str, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes (no client-side normalisation), read until the reply head is in."""
    with socket.create_connection(address(base_url), timeout=timeout_s) as sock:
        sock.sendall(request)
        data = b""
        try:
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data


def exchange_until_close(base_url: str, request: bytes, quiet_s: float) -> bytes:
    """Send raw bytes; read everything until the server closes or stays quiet `quiet_s`."""
    with socket.create_connection(address(base_url), timeout=5.0) as sock:
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


def raw_get(base_url: str, target: str, timeout_s: float = 5.0) -> bytes:
    """The whole reply to a raw `GET target` (exactly as written), read until the close."""
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    with socket.create_connection(address(base_url), timeout=timeout_s) as sock:
        sock.sendall(request)
        return read_until_close(sock)


def get_status(base_url: str, target: str) -> int | None:
    """The status of a raw `GET target`; a reply that leaks `ESCAPE_BAIT` fails the check."""
    reply = raw_get(base_url, target)
    expect(ESCAPE_BAIT not in reply, f"{target} leaked the file outside the directory")
    return status_of(reply)


def expect_still_serving(base_url: str, after: str) -> None:
    """`GET /` on a new connection is answered 200 with the contract's body."""
    reply = raw_get(base_url, contract.ROUTE_TEXT)
    expect(
        status_of(reply) == 200 and reply.endswith(b"\r\n\r\n" + contract.TEXT_BODY),
        f"not serving after {after}: GET / came {reply_text(reply)}; expected 200 with the "
        "contract's body",
    )

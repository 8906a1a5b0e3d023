"""`harness verify`: check a server honours the wire contract before any number is taken.

Like TechEmpower's verify pass: status, headers and bodies of every route, 404 for unknown
paths and for the routes a baseline does not serve, 405 for wrong methods, malformed
requests refused with the server still serving, the WebSocket handshake and its refusals
and closes, file escapes, the memcached socket service, and a sequential-latency check
over one keep-alive connection that catches delayed-ACK stalls (a socket without
TCP_NODELAY). Each check names the route it needs (`CHECK_ROUTES`,
`BACKEND_CHECK_ROUTES`), so a baseline is checked on the routes it serves. A server that
does not say which routes it serves (one given as a command) is probed first
(`served_routes`): a route answered 404 is not served, and its checks are `not supported`.

These checks are the one contract checker: the test suite runs them over every registered
server (tests/e2e/test_conformance.py) and the runner before every case.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import signal
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import connect

from harness.backends import KINDS, Backends
from harness.fileset import FileSet
from harness.server_process import start_server
from harness.sink_store import SinkStore
from model.errors import UserError
from model.scenarios import MC_KEY, MC_VALUE
from servers import FRAMEWORKS, contract

SEQUENTIAL_REQUESTS = 200
SEQUENTIAL_MEDIAN_LIMIT_MS = 20.0


@dataclass(frozen=True)
class Check:
    """One verified property: its name, whether it held, and what was seen."""

    name: str
    ok: bool
    detail: str = ""
    supported: bool = True  # False: the server does not serve this route (not a failure)


@dataclass(frozen=True)
class Verification:
    """Every check of one framework (with one sink)."""

    framework: str
    sink: str
    checks: tuple[Check, ...] = field(default_factory=tuple)
    error: str | None = None  # the server could not be started
    skipped: str | None = None  # the framework does not offer this sink (yet)

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, object]:
        return {
            "framework": self.framework,
            "sink": self.sink,
            "ok": self.ok,
            "error": self.error,
            "skipped": self.skipped,
            "checks": [asdict(c) for c in self.checks],
        }


class CheckFailed(Exception):
    """Raised inside a check with what was wrong."""


def _expect(condition: bool, detail: str) -> None:
    if not condition:
        raise CheckFailed(detail)


def _address(base_url: str) -> tuple[str, int]:
    url = httpx.URL(base_url)
    return url.host, url.port or 80


def raw_exchange(base_url: str, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes (no client-side normalisation), read until the reply head is in."""
    with socket.create_connection(_address(base_url), timeout=timeout_s) as sock:
        sock.sendall(request)
        data = b""
        try:
            while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data


def _status_of(reply: bytes) -> int | None:
    parts = reply.split(b"\r\n", 1)[0].split(b" ", 2)
    return int(parts[1]) if reply.startswith(b"HTTP/1.") and parts[1:2] != [b""] else None


def _raw_get(base_url: str, target: str, timeout_s: float = 5.0) -> bytes:
    """The whole reply to a raw `GET target` (exactly as written), read until the close."""
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    with socket.create_connection(_address(base_url), timeout=timeout_s) as sock:
        sock.sendall(request)
        return read_until_close(sock)


def _get_status(base_url: str, target: str) -> int | None:
    reply = _raw_get(base_url, target)
    _expect(ESCAPE_BAIT not in reply, f"{target} leaked the file outside the directory")
    return _status_of(reply)


def _expect_still_serving(base_url: str, after: str) -> None:
    reply = _raw_get(base_url, contract.ROUTE_TEXT)
    _expect(
        _status_of(reply) == 200 and reply.endswith(b"\r\n\r\n" + contract.TEXT_BODY),
        f"not serving after {after}: {reply[:60]!r}",
    )


def check_text_route(base_url: str) -> str:
    """`GET /` three times on one kept-alive connection: body, type, length, Date, Server."""
    with httpx.Client(base_url=base_url, timeout=5) as client:
        for _ in range(3):
            response = client.get(contract.ROUTE_TEXT)
            _expect(response.status_code == 200, f"status {response.status_code}")
            _expect(response.content == contract.TEXT_BODY, f"body {response.content[:60]!r}")
            content_type = response.headers.get("content-type", "")
            _expect(
                content_type.startswith(contract.TEXT_CONTENT_TYPE),
                f"Content-Type {content_type!r}",
            )
            length = response.headers.get("content-length")
            _expect(length == str(len(contract.TEXT_BODY)), f"Content-Length {length!r}")
            date = response.headers.get("date")
            _expect(
                date is not None and email.utils.parsedate_tz(date) is not None, f"Date {date!r}"
            )
            _expect(bool(response.headers.get("server")), "no Server header")
    return f"200, {len(response.content)} bytes, Server: {response.headers['server']}, kept alive"


def check_counter_route(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=5) as client:
        first = client.get(contract.ROUTE_COUNTER)
        second = client.get(contract.ROUTE_COUNTER)
    _expect(first.status_code == 200, f"status {first.status_code}")
    content_type = first.headers.get("content-type", "")
    _expect(content_type.startswith(contract.JSON_CONTENT_TYPE), f"Content-Type {content_type!r}")
    counter = first.json()
    _expect(set(counter) == set(contract.COUNTER_FIELDS), f"fields {sorted(counter)}")
    _expect(counter["open"] >= 1, f"open {counter['open']} while this connection is open")
    _expect(counter["max_open"] >= counter["open"], f"max_open {counter['max_open']}")
    requests = second.json()["requests"]
    _expect(requests == counter["requests"] + 1, f"requests went {counter['requests']}→{requests}")
    return json.dumps(counter)


LOG_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


def check_log_route(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=5) as client:
        for method in LOG_METHODS:
            body = b'{"check": "verify"}' if method != "GET" else None
            response = client.request(method, contract.ROUTE_LOG, content=body)
            _expect(response.status_code == 200, f"{method} status {response.status_code}")
            _expect(
                response.content == contract.LOG_REPLY_BODY, f"{method} body {response.content!r}"
            )
    return f"{', '.join(LOG_METHODS)} answered 'success'"


Routes = tuple[str, ...]


def routes_of(framework: str, routes: Routes | None = None) -> Routes:
    """`routes` when given (found by probing), else the registry's; a server that has not
    been probed yet is taken at its word: every route."""
    if routes is not None:
        return routes
    return FRAMEWORKS[framework].routes or contract.ALL_ROUTES


def _unserved_targets(framework: str, routes: Routes | None = None) -> list[str]:
    """Paths on the routes `framework` does not serve (a baseline): each must be 404."""
    targets: list[str] = []
    served = routes_of(framework, routes)
    for route in contract.ALL_ROUTES:
        if route in served:
            continue
        if route.endswith("/"):  # a prefix: a name under it, and the bare prefix
            targets += [route + "img-00000.jpg", route.rstrip("/")]
        else:
            targets += [route, route + "/"]
    return targets


def check_not_found(base_url: str, unserved: tuple[str, ...] = ()) -> str:
    """Unknown paths (and the routes a baseline does not serve) are 404; still serving."""
    for target in ("/no/such/route", "/x", *unserved):
        status = _get_status(base_url, target)
        _expect(status == 404, f"{target} answered {status}")
    _expect_still_serving(base_url, "a 404")
    return f"404 for {2 + len(unserved)} paths"


WRONG_METHODS = ("POST", "PUT", "DELETE")


def check_wrong_method(base_url: str) -> str:
    """POST, PUT, DELETE on `/` and `/counter` are 405 (nginx's `/` answers any method:
    this rule is checked on servers with `/counter`)."""
    with httpx.Client(base_url=base_url, timeout=5) as client:
        for method in WRONG_METHODS:
            for route in (contract.ROUTE_TEXT, contract.ROUTE_COUNTER):
                status = client.request(method, route).status_code
                _expect(status == 405, f"{method} {route} answered {status}")
    return f"405 for {', '.join(WRONG_METHODS)} on / and /counter"


# A request hidden in the body of another: a server that frames the first one wrongly
# answers it too (a second response on the connection), which is request smuggling.
SMUGGLED = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
# Requests every server must refuse, and survive: name, raw bytes, the statuses accepted.
# Each gets exactly one response, and nothing after it (the smuggled request unanswered).
MALFORMED_REQUESTS: tuple[tuple[str, bytes, tuple[int, ...]], ...] = (
    ("garbage", b"GARBAGE\r\n\r\n", (400,)),
    ("extra-words", b"GET / HTTP/1.1 extra words\r\n\r\n", (400,)),
    # 505 Version Not Supported is nginx's answer, and the RFC's
    ("bad-version", b"GET / HTTP/9.9x\r\nHost: x\r\n\r\n", (400, 505)),
    ("bad-content-length", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", (400,)),
    ("bad-header", b"GET / HTTP/1.1\r\nno colon header line\r\n\r\n", (400,)),
    ("above-the-root", b"GET /x/../../y HTTP/1.1\r\n\r\n", (400, 404)),
    (
        "oversized-headers",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
        (400, 413, 431),
    ),
    # Ambiguous framing (RFC 9112 §6.3, docs/contract.md "Hostile input"): 400 and close.
    # 501 is the RFC's answer to a transfer coding the server does not know (nginx's).
    (
        "transfer-encoding-xchunked",
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n" + SMUGGLED,
        (400, 501),
    ),
    (
        "content-length-twice",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: %d\r\n\r\n"
        % len(SMUGGLED)
        + SMUGGLED,
        (400,),
    ),
    ("content-length-plus", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", (400,)),
    (
        "content-length-and-chunked",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n" + SMUGGLED,
        (400,),
    ),
    ("nul-in-header", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", (400,)),
)
# (server, case) -> why that server answers otherwise and why it is not ours to fix. The
# check reports these in its detail instead of failing; an entry that no longer deviates
# fails the check, so the list cannot go stale.
MALFORMED_DEVIATIONS: dict[tuple[str, str], str] = {}
# How long a connection may stay quiet after its one response before the check stops
# waiting for a second one: on loopback a smuggled request's answer follows within
# microseconds, and the servers close after most of these refusals at once.
MALFORMED_QUIET_S = 0.5
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5][0-9][0-9] ")


def _exchange_until_close(base_url: str, request: bytes, quiet_s: float) -> bytes:
    """Send raw bytes; read everything until the server closes or stays quiet `quiet_s`."""
    with socket.create_connection(_address(base_url), timeout=5.0) as sock:
        sock.sendall(request)
        sock.settimeout(quiet_s)
        return read_until_close(sock)


def read_until_close(sock: socket.socket) -> bytes:
    """Everything `sock` receives until the peer closes, resets, or its timeout passes."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _responses(reply: bytes) -> int:
    """How many responses a reply holds: its status lines, wherever a body ended."""
    return len(_STATUS_LINE.findall(reply))


def check_malformed_requests(base_url: str, framework: str = "") -> str:
    """Every malformed request: one refusal (a status of its list) and nothing more on the
    connection, then the server still serves. `framework`'s known deviations are named."""
    deviated = []
    for name, request, accepted in MALFORMED_REQUESTS:
        reply = _exchange_until_close(base_url, request, MALFORMED_QUIET_S)
        status = _status_of(reply)
        responses = _responses(reply)
        ok = status in accepted and responses <= 1
        reason = MALFORMED_DEVIATIONS.get((framework, name))
        if reason is None and framework in FRAMEWORKS:  # a plugin's or a command's own
            reason = FRAMEWORKS[framework].deviations.get(name)
        if reason is None:
            _expect(status in accepted, f"{name} answered {reply[:60]!r}")
            _expect(responses <= 1, f"{name}: {responses} responses on one connection")
        else:
            _expect(not ok, f"{name} is refused now: drop its known deviation")
            deviated.append(f"{name} (known deviation: {reason})")
        _expect_still_serving(base_url, name)
    refused = len(MALFORMED_REQUESTS) - len(deviated)
    return f"{refused} malformed requests refused, still serving" + "".join(
        f"; {d}" for d in deviated
    )


def _ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + contract.ROUTE_WEBSOCKET


def _ws_connect(
    base_url: str,
    origin: str | None = contract.WS_ORIGIN,
    subprotocols: tuple[str, ...] = (contract.WS_SUBPROTOCOL,),
):
    return connect(
        _ws_url(base_url),
        origin=origin,  # type: ignore[arg-type]
        subprotocols=list(subprotocols),  # type: ignore[arg-type]
        compression=None,
        max_size=None,
        open_timeout=5,
        proxy=None,
    )


def check_websocket_handshake(base_url: str) -> str:
    with _ws_connect(base_url) as ws:
        _expect(ws.subprotocol == contract.WS_SUBPROTOCOL, f"subprotocol {ws.subprotocol!r}")
        for i in range(5):
            ws.send(json.dumps({"a": "b", "i": i}))
        ws.ping().wait(5)
    return f"101, subprotocol {contract.WS_SUBPROTOCOL}, messages accepted"


def check_websocket_long_message(base_url: str) -> str:
    """A message just under the limit is accepted and the connection stays open."""
    payload = json.dumps({"testKeyValue": "v" * (contract.WS_MAX_MESSAGE_BYTES - 100)})
    with _ws_connect(base_url) as ws:
        ws.send(payload)
        ws.ping().wait(5)
        ws.send('{"still": "open"}')
        ws.ping().wait(5)
    return f"a {len(payload)}-byte message accepted"


def _refused_with(base_url: str, **options: Any) -> int | None:
    try:
        with _ws_connect(base_url, **options):
            return None
    except InvalidStatus as refused:
        return refused.response.status_code


def check_websocket_origin(base_url: str) -> str:
    for origin in ("elsewhere", None):
        status = _refused_with(base_url, origin=origin)
        _expect(status == contract.WS_BAD_ORIGIN_STATUS, f"Origin {origin!r} answered {status}")
    _expect_still_serving(base_url, "a refused handshake")
    return f"Origin 'elsewhere' and no Origin refused with {contract.WS_BAD_ORIGIN_STATUS}"


def check_websocket_subprotocol(base_url: str) -> str:
    status = _refused_with(base_url, subprotocols=())
    _expect(status == contract.WS_NO_SUBPROTOCOL_STATUS, f"no subprotocol answered {status}")
    return f"no subprotocol refused with {status}"


def _close_code_after(base_url: str, payload: str | bytes) -> int | None:
    with _ws_connect(base_url) as ws:
        try:
            ws.send(payload)  # the server may close while a big message is still going out
            for _ in range(10):
                ws.recv(timeout=5)
        except ConnectionClosed:
            return ws.close_code  # 1006 when no close frame came
        except TimeoutError:
            return None
    return None


def _bad_messages_close_with(base_url: str, code: int, *payloads: str | bytes) -> str:
    for payload in payloads:
        closed = _close_code_after(base_url, payload)
        _expect(closed == code, f"{payload[:20]!r}… closed with {closed}, not {code}")
    _expect_still_serving(base_url, f"a {code} close")
    return f"closed with {code}"


def check_websocket_binary(base_url: str) -> str:
    return _bad_messages_close_with(base_url, contract.WS_CLOSE_UNSUPPORTED_DATA, b"\x00\x01bin")


def check_websocket_invalid_json(base_url: str) -> str:
    code = contract.WS_CLOSE_INVALID_PAYLOAD
    return "invalid JSON and a non-object " + _bad_messages_close_with(
        base_url, code, "not json", "[1, 2]"
    )


def check_websocket_too_big(base_url: str) -> str:
    payload = '{"a": "' + "x" * contract.WS_MAX_MESSAGE_BYTES + '"}'
    return "a message over 1 MiB " + _bad_messages_close_with(
        base_url, contract.WS_CLOSE_TOO_BIG, payload
    )


# -- raw WebSocket frames (RFC 6455 §5.2): what no well-behaved client library sends --------
_WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def ws_frame(
    opcode: int,
    payload: bytes = b"",
    *,
    fin: bool = True,
    mask: bool = True,
    declared_length: int | None = None,
    rsv: int = 0,
    mask_key: bytes | None = None,
    length_bytes: int | None = None,
) -> bytes:
    """One frame as a client sends it: masked unless `mask=False`; `declared_length` puts
    another length than the payload's in the header (a 2 GiB frame, sent as a header).

    For the fuzz suite: `rsv` sets the three RSV bits (0-7, no extension allows them),
    `mask_key` is the 4-byte key (a random one by default), and `length_bytes` (2 or 8)
    writes the length in that extended form even when a shorter one would do."""
    length = len(payload) if declared_length is None else declared_length
    head = bytes([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mask_bit = 0x80 if mask else 0
    if length_bytes is None:
        length_bytes = 0 if length < 126 else 2 if length < 1 << 16 else 8
    if length_bytes == 0:
        head += bytes([mask_bit | length])
    elif length_bytes == 2:
        head += bytes([mask_bit | 126]) + length.to_bytes(2)
    else:
        head += bytes([mask_bit | 127]) + length.to_bytes(8)
    if not mask:
        return head + payload
    key = os.urandom(4) if mask_key is None else mask_key
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def raw_ws_connect(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> socket.socket:
    """A raw socket to `/ws` past a valid handshake (the contract's Origin and protocol)."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.sendall(
        (
            f"GET {contract.ROUTE_WEBSOCKET} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {_WS_KEY}\r\nSec-WebSocket-Version: 13\r\n"
            f"Origin: {contract.WS_ORIGIN}\r\nSec-WebSocket-Protocol: {contract.WS_SUBPROTOCOL}\r\n"
            "\r\n"
        ).encode()
    )
    reply = b""
    while b"\r\n\r\n" not in reply:
        chunk = sock.recv(4096)
        assert chunk, f"closed during the handshake: {reply!r}"
        reply += chunk
    assert reply.startswith(b"HTTP/1.1 101"), reply
    rest = reply.partition(b"\r\n\r\n")[2]
    assert not rest, rest  # the server sends nothing before the client does
    return sock


def raw_ws_close_code(sock: socket.socket, timeout_s: float = 5.0) -> int | None:
    """Read frames until the server's close frame: its code (None when the server dropped
    the connection without one, or sent none within `timeout_s`)."""
    sock.settimeout(timeout_s)
    buffer = b""
    try:
        while True:
            while len(buffer) >= 2:
                length = buffer[1] & 0x7F
                start = 2 + (2 if length == 126 else 8 if length == 127 else 0)
                if length >= 126:
                    if len(buffer) < start:
                        break
                    length = int.from_bytes(buffer[2:start])
                if len(buffer) < start + length:
                    break
                opcode, payload = buffer[0] & 0x0F, buffer[start : start + length]
                buffer = buffer[start + length :]
                if opcode == 0x8:
                    return int.from_bytes(payload[:2]) if len(payload) >= 2 else None
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buffer += chunk
    except (TimeoutError, ConnectionResetError):
        return None


def _port_of(base_url: str) -> int:
    return int(base_url.rsplit(":", 1)[1].split("/", 1)[0])


# RFC 6455 rules beyond the contract's codes, sent as raw frames (servers/core/websocket.py):
# what each earns as the server's close code.
RAW_FRAME_CASES: dict[str, tuple[bytes, int]] = {
    "an unmasked frame": (
        ws_frame(0x1, b'{"a": 1}', mask=False),
        contract.WS_CLOSE_PROTOCOL_ERROR,
    ),
    "invalid UTF-8": (ws_frame(0x1, b'{"a": "\xff\xfe"}'), contract.WS_CLOSE_INVALID_PAYLOAD),
    "close code 999": (ws_frame(0x8, (999).to_bytes(2)), contract.WS_CLOSE_PROTOCOL_ERROR),
    "a header declaring 2 GiB": (
        ws_frame(0x1, b"", declared_length=2**31),
        contract.WS_CLOSE_TOO_BIG,
    ),
    # found by the fuzz suite (tests/e2e/test_fuzz.py): tornado dropped a reserved opcode
    # and a bad close reason without a close frame, twisted a one-byte close and a bad
    # reason, aiohttp echoed 1006 with 1000, and the Python servers stored NaN
    "a reserved opcode": (ws_frame(0x3, b"x"), contract.WS_CLOSE_PROTOCOL_ERROR),
    "close code 1006": (ws_frame(0x8, (1006).to_bytes(2)), contract.WS_CLOSE_PROTOCOL_ERROR),
    "a one-byte close payload": (ws_frame(0x8, b"\x03"), contract.WS_CLOSE_PROTOCOL_ERROR),
    "a close reason not UTF-8": (
        ws_frame(0x8, (1000).to_bytes(2) + b"\xff"),
        contract.WS_CLOSE_INVALID_PAYLOAD,
    ),
    "NaN, which is not JSON": (ws_frame(0x1, b'{"a": NaN}'), contract.WS_CLOSE_INVALID_PAYLOAD),
}


def check_websocket_raw_frames(base_url: str) -> str:
    """Raw frames no client library sends: each closes with RFC 6455's code, at once."""
    port = _port_of(base_url)
    host = _address(base_url)[0]
    for what, (frame, code) in RAW_FRAME_CASES.items():
        with raw_ws_connect(port, host=host) as sock:
            sock.sendall(frame)
            closed = raw_ws_close_code(sock, timeout_s=3.0)
        _expect(closed == code, f"{what} closed with {closed}, not {code}")
    _expect_still_serving(base_url, "raw frames")
    return ", ".join(f"{what} {code}" for what, (_, code) in RAW_FRAME_CASES.items())


def check_sequential_latency(base_url: str) -> str:
    """The median of back-to-back requests on one keep-alive connection: catches 40 ms stalls."""
    with httpx.Client(base_url=base_url, timeout=5) as client:
        client.get(contract.ROUTE_TEXT)  # connect outside the timing
        latencies_ms = []
        for _ in range(SEQUENTIAL_REQUESTS):
            started = time.perf_counter()
            client.get(contract.ROUTE_TEXT)
            latencies_ms.append((time.perf_counter() - started) * 1000.0)
    median_ms = statistics.median(latencies_ms)
    _expect(
        median_ms <= SEQUENTIAL_MEDIAN_LIMIT_MS,
        f"median {median_ms:.1f} ms over {SEQUENTIAL_REQUESTS} sequential requests: "
        "delayed-ACK stalls (is TCP_NODELAY set on every socket?)",
    )
    return f"median {median_ms:.2f} ms, max {max(latencies_ms):.1f} ms"


HTTP_CHECKS: dict[str, Callable[[str], str]] = {
    "text": check_text_route,
    "counter": check_counter_route,
    "log": check_log_route,
    "not-found": check_not_found,
    "wrong-method": check_wrong_method,
    "malformed": check_malformed_requests,
    "sequential-latency": check_sequential_latency,
}
WEBSOCKET_CHECKS: dict[str, Callable[[str], str]] = {
    "ws-handshake": check_websocket_handshake,
    "ws-long-message": check_websocket_long_message,
    "ws-origin": check_websocket_origin,
    "ws-subprotocol": check_websocket_subprotocol,
    "ws-1003": check_websocket_binary,
    "ws-1007": check_websocket_invalid_json,
    "ws-1009": check_websocket_too_big,
    "ws-raw-frames": check_websocket_raw_frames,
}


# The route each check needs: a server that does not serve it reports "not supported".
CHECK_ROUTES: dict[str, str] = {
    "text": contract.ROUTE_TEXT,
    "counter": contract.ROUTE_COUNTER,
    "log": contract.ROUTE_LOG,
    "not-found": contract.ROUTE_TEXT,
    "wrong-method": contract.ROUTE_COUNTER,
    "malformed": contract.ROUTE_TEXT,
    "sequential-latency": contract.ROUTE_TEXT,
    **dict.fromkeys(WEBSOCKET_CHECKS, contract.ROUTE_WEBSOCKET),
}


def checks_for(framework: str, routes: Routes | None = None) -> dict[str, Callable[[str], str]]:
    """The HTTP and WebSocket checks of the routes `framework` serves (`routes`: as found
    by probing it)."""
    served = routes_of(framework, routes)
    checks = {
        name: check
        for name, check in (HTTP_CHECKS | WEBSOCKET_CHECKS).items()
        if CHECK_ROUTES[name] in served
    }
    if "malformed" in checks:
        checks["malformed"] = lambda url: check_malformed_requests(url, framework)
    if "not-found" in checks:
        unserved = tuple(_unserved_targets(framework, routes))
        checks["not-found"] = lambda url: check_not_found(url, unserved)
    for name, reason in FRAMEWORKS[framework].deviations.items():
        if name in checks:  # the others name malformed requests (check_malformed_requests)
            checks[name] = _known_deviation(checks[name], reason)
    return checks


def _known_deviation(check: Callable[[str], str], reason: str) -> Callable[[str], str]:
    """A check a plugin's or a command's server is known to fail, for `reason` (not ours
    to fix): its failure is reported, not failed; its passing fails (drop the entry)."""

    def deviating(url: str) -> str:
        try:
            check(url)
        except CheckFailed as failure:
            return f"known deviation: {reason} (seen: {failure})"
        raise CheckFailed(f"passes now: drop its known deviation ({reason})")

    return deviating


# The memcached socket service is `python -m servers`' own (--mc-socket-port): a server
# run as a command does not have it, whether or not it serves /mc/{key}.
NO_SOCKET_SERVICE = "not supported (the memcached socket service is python -m servers' own)"


def not_supported(
    framework: str, backends: bool = False, routes: Routes | None = None
) -> tuple[Check, ...]:
    """The checks skipped because `framework` does not serve their route (a baseline, or
    a route a command's server answered 404 when probed); with `backends`, the backend
    checks' too."""
    served = routes_of(framework, routes)

    def why(route: str) -> str:
        if routes is None:
            return route
        return f"{route}: {'handshake refused' if route == contract.ROUTE_WEBSOCKET else '404'}"

    checks = CHECK_ROUTES | (BACKEND_CHECK_ROUTES if backends else {})
    skipped = [
        Check(name, True, f"not supported ({why(route)})", supported=False)
        for name, route in checks.items()
        if route not in served
    ]
    if (
        backends
        and not FRAMEWORKS[framework].telemetry
        and contract.ROUTE_MEMCACHED_PREFIX in served
    ):
        skipped.append(Check("memcached-socket", True, NO_SOCKET_SERVICE, supported=False))
    return tuple(skipped)


# -- which routes a server serves, when it does not say (a server given as a command) ------
# The rule ("404 is not served"): an HTTP route is served unless its probe is answered 404
# (what a baseline answers on the routes it lacks). Anything else — 200, a wrong body, 500,
# a reset — means served, and the route's checks then judge the answer: a route answered
# wrongly fails verify. `/ws` is served when the contract's own valid handshake (Origin
# `agent`, subprotocol `myprotocol`) is accepted with 101; a refusal of any status means it
# is not, because an ASGI or WSGI app without a WebSocket route cannot answer 404 to an
# upgrade (uvicorn answers 403 or 500). The backend routes are probed only with the
# backends running (a file of the set, its GridFS copy, the memcached key): without them no
# case needs those routes, and they count as not served.
NOT_SERVED_STATUS = 404
PROBE_BODY = b'{"probe": "served_routes"}'


def _probe_status(base_url: str, method: str, path: str, body: bytes | None = None) -> int | None:
    try:
        return httpx.request(method, base_url + path, content=body, timeout=5).status_code
    except httpx.HTTPError:
        return None  # no answer: not a 404, so the route's checks will say what is wrong


def _probe_websocket(base_url: str) -> int | None:
    """101 when the contract's handshake is accepted, else the refusal's status."""
    try:
        with _ws_connect(base_url):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code
    except (WebSocketException, OSError, TimeoutError):
        return None


def served_routes(base_url: str, backends: Backends | None = None) -> Routes:
    """The routes a running server serves, by the rule above (`NOT_SERVED_STATUS`)."""
    probes: dict[str, Callable[[], int | None]] = {
        contract.ROUTE_TEXT: lambda: _probe_status(base_url, "GET", contract.ROUTE_TEXT),
        contract.ROUTE_COUNTER: lambda: _probe_status(base_url, "GET", contract.ROUTE_COUNTER),
        contract.ROUTE_LOG: lambda: _probe_status(base_url, "POST", contract.ROUTE_LOG, PROBE_BODY),
        contract.ROUTE_WEBSOCKET: lambda: _probe_websocket(base_url),
    }
    fileset = backends.fileset if backends is not None else None
    if backends is not None and fileset is not None:
        files = contract.ROUTE_FILES_PREFIX + fileset.names[0]
        probes[contract.ROUTE_FILES_PREFIX] = lambda: _probe_status(base_url, "GET", files)
        if backends.mongo_url is not None:  # the set is in GridFS too
            gridfs = contract.ROUTE_GRIDFS_PREFIX + fileset.names[0]
            probes[contract.ROUTE_GRIDFS_PREFIX] = lambda: _probe_status(base_url, "GET", gridfs)
    if backends is not None and backends.memcached is not None:
        mc = contract.ROUTE_MEMCACHED_PREFIX + MC_KEY
        probes[contract.ROUTE_MEMCACHED_PREFIX] = lambda: _probe_status(base_url, "GET", mc)
    served = []
    for route in contract.ALL_ROUTES:
        if route not in probes:
            continue
        status = probes[route]()
        if route == contract.ROUTE_WEBSOCKET and status in (101, None):
            served.append(route)  # None: no answer at all; its checks say what is wrong
        elif route != contract.ROUTE_WEBSOCKET and status != NOT_SERVED_STATUS:
            served.append(route)
    return tuple(served)


def run_checks(base_url: str, checks: dict[str, Callable[[str], str]]) -> tuple[Check, ...]:
    """Run every check against a server at `base_url`; a failing one never stops the rest."""
    results = []
    for name, check in checks.items():
        try:
            results.append(Check(name, True, check(base_url)))
        except CheckFailed as failure:
            results.append(Check(name, False, str(failure)))
        except (httpx.HTTPError, WebSocketException, OSError, ValueError, AssertionError) as error:
            results.append(Check(name, False, f"{type(error).__name__}: {error}"))
    return tuple(results)


def check_telemetry(lines: list[dict[str, object]]) -> Check:
    if not lines:
        return Check("telemetry", False, "no telemetry line")
    missing = set(contract.TELEMETRY_FIELDS) - set(lines[-1])
    if missing:
        return Check("telemetry", False, f"missing fields {sorted(missing)}")
    return Check("telemetry", True, f"{len(lines)} lines, every field present")


def check_sink_record(base_url: str, store: SinkStore) -> str:
    """A /log record reaches the sink (file: within a flush; mongo: acknowledged)."""
    before = store.count() or 0
    marker = f"verify-{time.time_ns()}"
    response = httpx.post(base_url + contract.ROUTE_LOG, content=marker.encode(), timeout=5)
    _expect(response.status_code == 200, f"/log answered {response.status_code}")
    deadline = time.monotonic() + 2.0
    while (store.count() or 0) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    after = store.count() or 0
    _expect(after > before, f"the {store.sink} sink still holds {after} records")
    return f"{after - before} record stored ({store.sink})"


# -- backends: files, GridFS, memcached ---------------------------------------------------
VERIFY_FILE_COUNT = 20
# Planted beside the files directory, with a symlink to it inside: no reply may contain it.
ESCAPE_BAIT = b"outside the files directory"
ESCAPE_BAIT_NAME = "secret.txt"
ESCAPE_LINK_NAME = "link.txt"
# Names tried after /files/ and /gridfs/: escapes, encodings, hidden and empty names.
ESCAPES = (
    "../secret.txt",
    "..%2fsecret.txt",
    "%2e%2e%2fsecret.txt",
    "%2E%2E/secret.txt",
    "..%5csecret.txt",
    ESCAPE_LINK_NAME,  # a symlink inside the directory pointing outside it
    "",
    ".",
    ".hidden",
    "%00secret.txt",
    "..%2f..%2f..%2fetc%2fpasswd",
    "../../etc/passwd",
    "img-99999.jpg",  # well-formed but missing
)


def plant_escape_bait(files_dir: Path) -> None:
    """A secret beside `files_dir` and a symlink to it inside: what the escape checks try."""
    secret = files_dir.parent / ESCAPE_BAIT_NAME
    secret.write_bytes(ESCAPE_BAIT)
    link = files_dir / ESCAPE_LINK_NAME
    if not link.is_symlink():
        link.symlink_to(secret)


def verify_backends(
    workdir: Path, mongo_url: str | None = None, mongo_db: str = contract.GRIDFS_DATABASE
) -> Backends:
    """A small file set on disk and in GridFS (database `mongo_db`), and memcached with the
    memcached-proxy study's value: what the `/files`, `/gridfs` and `/mc` checks need,
    started once for every server verified."""
    backends = Backends(
        KINDS,
        mongo_url=mongo_url,
        mongo_db=mongo_db,
        file_count=VERIFY_FILE_COUNT,
        files_dir=workdir / "files",
    )
    if backends.fileset is not None:
        plant_escape_bait(backends.fileset.directory)
    return backends


def backend_checks(fileset: FileSet | None, mc_port: int) -> dict[str, Callable[[str], str]]:
    """The checks of `/files`, `/gridfs`, `/mc` and the memcached socket service."""
    if fileset is None:
        return {}
    return {
        "files": lambda url: check_file_route(url, fileset, contract.ROUTE_FILES_PREFIX),
        "files-escapes": lambda url: check_escapes(url, fileset, contract.ROUTE_FILES_PREFIX),
        "gridfs": lambda url: check_file_route(url, fileset, contract.ROUTE_GRIDFS_PREFIX),
        "gridfs-escapes": lambda url: check_escapes(url, fileset, contract.ROUTE_GRIDFS_PREFIX),
        "memcached": check_memcached_route,
        "memcached-socket": lambda url: check_memcached_socket(url, mc_port),
    }


BACKEND_CHECK_ROUTES = {
    "files": contract.ROUTE_FILES_PREFIX,
    "files-escapes": contract.ROUTE_FILES_PREFIX,
    "gridfs": contract.ROUTE_GRIDFS_PREFIX,
    "gridfs-escapes": contract.ROUTE_GRIDFS_PREFIX,
    "memcached": contract.ROUTE_MEMCACHED_PREFIX,
    "memcached-socket": contract.ROUTE_MEMCACHED_PREFIX,
}


def contract_checks(
    framework: str,
    fileset: FileSet | None = None,
    mc_port: int = 0,
    routes: Routes | None = None,
) -> dict[str, Callable[[str], str]]:
    """Every check of the routes `framework` serves; with a file set (and the server's
    memcached socket port), the backend checks too. The one contract checker: `harness
    verify` and the test suite run these; the runner's verify pass runs `checks_for`, the
    part that needs no backend."""
    return checks_for(framework, routes) | served_backend_checks(
        framework, fileset, mc_port, routes
    )


def served_backend_checks(
    framework: str, fileset: FileSet | None, mc_port: int, routes: Routes | None = None
) -> dict[str, Callable[[str], str]]:
    """The backend checks of the backend routes `framework` serves (no socket service
    check for a command server: it has none)."""
    served = routes_of(framework, routes)
    telemetry = FRAMEWORKS[framework].telemetry
    return {
        name: check
        for name, check in backend_checks(fileset, mc_port).items()
        if BACKEND_CHECK_ROUTES[name] in served and (telemetry or name != "memcached-socket")
    }


def contract_check_names(framework: str) -> list[str]:
    """The names `contract_checks(framework, fileset)` has, known without a server."""
    served = routes_of(framework)
    return [*checks_for(framework)] + [
        name
        for name, route in BACKEND_CHECK_ROUTES.items()
        if route in served and (FRAMEWORKS[framework].telemetry or name != "memcached-socket")
    ]


def one_of_each_kind(fileset: FileSet) -> list[str]:
    """A file of each extension in the set (jpg, png, gif)."""
    picked: dict[str, str] = {}
    for name in fileset.names:
        picked.setdefault(Path(name).suffix, name)
    return sorted(picked.values())


def check_file_route(base_url: str, fileset: FileSet, prefix: str) -> str:
    """One file of each kind and the first three: exact bytes, Content-Type and -Length."""
    from servers.core import static

    names = sorted({*one_of_each_kind(fileset), *fileset.names[:3]})
    with httpx.Client(base_url=base_url, timeout=10) as client:
        for name in names:
            reply = client.get(prefix + name)
            _expect(reply.status_code == 200, f"{prefix}{name} answered {reply.status_code}")
            data = (fileset.directory / name).read_bytes()
            _expect(reply.content == data, f"{prefix}{name}: body differs from the file")
            length = reply.headers.get("content-length")
            _expect(length == str(len(data)), f"{prefix}{name}: Content-Length {length}")
            kind = reply.headers.get("content-type", "").split(";")[0]
            _expect(kind == static.content_type(name), f"{prefix}{name}: Content-Type {kind}")
    return f"{len(names)} files byte-exact with their type and length"


def check_escapes(base_url: str, fileset: FileSet, prefix: str) -> str:
    """Traversals, encoded slashes, absolute paths, hidden and missing names: all 404, none
    leaks the file planted outside the directory, and the server keeps serving."""
    absolute = str(fileset.directory.parent / ESCAPE_BAIT_NAME)
    targets = [prefix + name for name in ESCAPES]
    targets += [prefix + absolute, prefix + absolute.replace("/", "%2f"), prefix.rstrip("/")]
    for target in targets:
        status = _get_status(base_url, target)
        _expect(status == 404, f"{target} answered {status}")
    _expect_still_serving(base_url, "the escapes")
    return f"{len(targets)} escapes and missing names 404"


def check_memcached_route(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        hit = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        _expect(hit.status_code == 200 and hit.content == MC_VALUE, f"hit: {hit.status_code}")
        length = hit.headers.get("content-length")
        _expect(length == str(contract.MC_VALUE_BYTES), f"hit: Content-Length {length}")
        miss = client.get(contract.ROUTE_MEMCACHED_PREFIX + "verify-missing-key")
        _expect(miss.status_code == 404, f"a miss answered {miss.status_code}")
        too_long = client.get(
            contract.ROUTE_MEMCACHED_PREFIX + "k" * (contract.MC_MAX_KEY_BYTES + 1)
        )
        _expect(too_long.status_code == 404, f"a key too long answered {too_long.status_code}")
    return "hit returns the 100-byte value; a miss and a key too long 404"


def _read_until(sock: socket.socket, ending: bytes, count: int = 1) -> bytes:
    data = b""
    while data.count(ending) < count:
        chunk = sock.recv(65536)
        _expect(bool(chunk), f"closed after {data[:60]!r}")
        data += chunk
    return data


def check_memcached_socket(base_url: str, mc_port: int) -> str:
    """The socket service: a hit, a miss, three gets in one write answered in order, an
    unknown command, and `quit`."""
    _expect(mc_port > 0, "no mc_port in the telemetry line")
    key = MC_KEY.encode()
    hit = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(MC_VALUE), MC_VALUE)
    with socket.create_connection((_address(base_url)[0], mc_port), 5) as sock:
        sock.sendall(b"get " + key + b"\r\n")
        _expect((got := _read_until(sock, b"END\r\n")) == hit, f"a hit answered {got[:60]!r}")
        sock.sendall(b"get nothing-here\r\n")
        _expect((got := _read_until(sock, b"END\r\n")) == b"END\r\n", f"a miss: {got[:60]!r}")
        sock.sendall(b"get " + key + b"\r\nget nothing-here\r\nget " + key + b"\r\n")
        got = _read_until(sock, b"END\r\n", 3)
        _expect(got == hit + b"END\r\n" + hit, f"three gets in one write: {got[:60]!r}")
        sock.sendall(b"set x 0 0 1\r\n")
        _expect((got := _read_until(sock, b"\r\n")) == b"ERROR\r\n", f"set answered {got!r}")
        sock.sendall(b"quit\r\n")
        _expect(sock.recv(100) == b"", "quit left the connection open")
    return f"get hit, miss, three in one write, ERROR, quit on port {mc_port}"


def verify_framework(
    framework: str,
    sink: str = "empty",
    cpus: str | None = None,
    mongo_url: str | None = None,
    backends: Backends | None = None,
    mongo_db: str = contract.GRIDFS_DATABASE,
) -> Verification:
    """Start `framework` with `sink`, run every check of the routes it serves (with
    `backends`: files, GridFS, memcached too), stop it (exit status checked too). A server
    that does not say which routes it serves is probed for them first (`served_routes`)."""
    info = FRAMEWORKS[framework]
    if sink not in info.sinks:
        return Verification(framework, sink, skipped=f"{framework} has no {sink} sink")
    try:
        store = SinkStore(sink, mongo_url=mongo_url, mongo_db=mongo_db)
    except UserError as error:
        return Verification(framework, sink, error=str(error))
    with store:
        args = store.server_args()
        if backends is not None:
            if sink == "mongo":  # one --mongo-url: GridFS goes into the sink's database too
                backends.load_gridfs_into(str(store.mongo_url), mongo_db)
            args += backends.server_args(args)
        try:
            server = start_server(framework, sink=sink, cpus=cpus, extra_args=args)
        except Exception as error:  # a server that cannot start is a failed verification
            return Verification(framework, sink, error=str(error))
        try:
            routes = None if info.routes is not None else served_routes(server.url, backends)
            checks = run_checks(server.url, checks_for(framework, routes))
            if sink != "empty":
                checks += run_checks(
                    server.url, {"sink-record": lambda url: check_sink_record(url, store)}
                )
            if backends is not None:
                lines = server.telemetry_lines()
                mc_port = int(lines[0].get("mc_port") or 0) if lines else 0
                checks += run_checks(
                    server.url,
                    served_backend_checks(framework, backends.fileset, mc_port, routes),
                )
            checks += not_supported(framework, backends=backends is not None, routes=routes)
        finally:
            status = server.stop()
    stopped = Check("sigterm", *stopped_cleanly(status, info.telemetry))
    telemetry = (
        check_telemetry(server.telemetry_lines())
        if info.telemetry
        else Check("telemetry", True, NO_TELEMETRY, supported=False)
    )
    return Verification(framework, sink, (*checks, telemetry, stopped))


NO_TELEMETRY = "not supported (a server run as a command writes no telemetry line)"


def stopped_cleanly(status: int, contract_server: bool) -> tuple[bool, str]:
    """Whether an exit status after SIGTERM is a clean stop, and how it reads. Ours exit 0
    (the contract); a server run as a command may also end by the SIGTERM itself once
    it has shut down (uvicorn re-raises it), which `stop` saw within the grace."""
    if status == 0:
        return True, "exit status 0"
    if not contract_server and status == -signal.SIGTERM:
        return True, f"exit status {status}: ended by the SIGTERM, within the grace"
    return False, f"exit status {status}"

"""`harness verify`: check a server honours the wire contract before any number is taken.

Like TechEmpower's verify pass: status, headers and bodies of every route, the WebSocket
handshake and its refusals and closes, and a sequential-latency check over one keep-alive
connection that catches delayed-ACK stalls (a socket without TCP_NODELAY).
"""

from __future__ import annotations

import email.utils
import json
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


def check_text_route(base_url: str) -> str:
    response = httpx.get(base_url + contract.ROUTE_TEXT, timeout=5)
    _expect(response.status_code == 200, f"status {response.status_code}")
    _expect(response.content == contract.TEXT_BODY, f"body {response.content[:60]!r}")
    content_type = response.headers.get("content-type", "")
    _expect(content_type.startswith(contract.TEXT_CONTENT_TYPE), f"Content-Type {content_type!r}")
    length = response.headers.get("content-length")
    _expect(length == str(len(contract.TEXT_BODY)), f"Content-Length {length!r}")
    date = response.headers.get("date")
    _expect(date is not None and email.utils.parsedate_tz(date) is not None, f"Date {date!r}")
    _expect(bool(response.headers.get("server")), "no Server header")
    return f"200, {len(response.content)} bytes, Server: {response.headers['server']}"


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
    _expect(second.json()["requests"] > counter["requests"], "requests did not increase")
    return json.dumps(counter)


def check_log_route(base_url: str) -> str:
    for method in ("POST", "PUT", "GET"):
        body = b'{"check": "verify"}' if method != "GET" else None
        response = httpx.request(method, base_url + contract.ROUTE_LOG, content=body, timeout=5)
        _expect(response.status_code == 200, f"{method} status {response.status_code}")
        _expect(response.content == contract.LOG_REPLY_BODY, f"{method} body {response.content!r}")
    return "POST, PUT, GET answered 'success'"


def check_errors(base_url: str) -> str:
    missing = httpx.get(base_url + "/no/such/route", timeout=5).status_code
    _expect(missing == 404, f"unknown path answered {missing}")
    wrong = httpx.post(base_url + contract.ROUTE_TEXT, timeout=5).status_code
    _expect(wrong == 405, f"POST / answered {wrong}")
    return "404 unknown path, 405 wrong method"


def _ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + contract.ROUTE_WEBSOCKET


def _ws_connect(base_url: str, origin: str | None = contract.WS_ORIGIN):
    return connect(
        _ws_url(base_url),
        origin=origin,  # type: ignore[arg-type]
        subprotocols=[contract.WS_SUBPROTOCOL],  # type: ignore[list-item]
        compression=None,
        max_size=None,
        open_timeout=5,
        proxy=None,
    )


def check_websocket_handshake(base_url: str) -> str:
    with _ws_connect(base_url) as ws:
        _expect(ws.subprotocol == contract.WS_SUBPROTOCOL, f"subprotocol {ws.subprotocol!r}")
        ws.send('{"a": "b"}')
        ws.ping().wait(5)
    return f"101, subprotocol {contract.WS_SUBPROTOCOL}, a message accepted"


def check_websocket_origin(base_url: str) -> str:
    try:
        with _ws_connect(base_url, origin="elsewhere"):
            pass
    except InvalidStatus as refused:
        status = refused.response.status_code
        _expect(status == contract.WS_BAD_ORIGIN_STATUS, f"bad origin answered {status}")
        return f"Origin 'elsewhere' refused with {status}"
    raise CheckFailed("a WebSocket with Origin 'elsewhere' was accepted")


def _close_code_after(base_url: str, payload: str) -> int | None:
    with _ws_connect(base_url) as ws:
        try:
            ws.send(payload)  # the server may close while a big message is still going out
            for _ in range(10):
                ws.recv(timeout=5)
        except ConnectionClosed:
            return ws.close_code
        except TimeoutError:
            return None
    return None


def check_websocket_invalid_json(base_url: str) -> str:
    code = _close_code_after(base_url, "not json")
    _expect(code == contract.WS_CLOSE_INVALID_PAYLOAD, f"invalid JSON closed with {code}")
    return f"invalid JSON closed with {code}"


def check_websocket_too_big(base_url: str) -> str:
    code = _close_code_after(base_url, '{"a": "' + "x" * contract.WS_MAX_MESSAGE_BYTES + '"}')
    _expect(code == contract.WS_CLOSE_TOO_BIG, f"a message over 1 MiB closed with {code}")
    return f"a message over 1 MiB closed with {code}"


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
    "errors": check_errors,
    "sequential-latency": check_sequential_latency,
}
WEBSOCKET_CHECKS: dict[str, Callable[[str], str]] = {
    "ws-handshake": check_websocket_handshake,
    "ws-origin": check_websocket_origin,
    "ws-1007": check_websocket_invalid_json,
    "ws-1009": check_websocket_too_big,
}


# The route each check exercises: a server that does not serve it reports "not supported".
CHECK_ROUTES: dict[str, str] = {
    "text": contract.ROUTE_TEXT,
    "counter": contract.ROUTE_COUNTER,
    "log": contract.ROUTE_LOG,
    "errors": contract.ROUTE_LOG,  # 404/405/400 rules are checked against the full contract
    "sequential-latency": contract.ROUTE_TEXT,
    **dict.fromkeys(WEBSOCKET_CHECKS, contract.ROUTE_WEBSOCKET),
}


def checks_for(framework: str) -> dict[str, Callable[[str], str]]:
    """The HTTP and WebSocket checks of the routes `framework` serves."""
    served = FRAMEWORKS[framework]
    return {
        name: check
        for name, check in (HTTP_CHECKS | WEBSOCKET_CHECKS).items()
        if served.serves(CHECK_ROUTES[name])
    }


def not_supported(framework: str) -> tuple[Check, ...]:
    """The checks skipped because `framework` does not serve their route (a baseline)."""
    return tuple(
        Check(name, True, f"not supported ({CHECK_ROUTES[name]})", supported=False)
        for name in HTTP_CHECKS | WEBSOCKET_CHECKS
        if not FRAMEWORKS[framework].serves(CHECK_ROUTES[name])
    )


def run_checks(base_url: str, checks: dict[str, Callable[[str], str]]) -> tuple[Check, ...]:
    """Run every check against a server at `base_url`; a failing one never stops the rest."""
    results = []
    for name, check in checks.items():
        try:
            results.append(Check(name, True, check(base_url)))
        except CheckFailed as failure:
            results.append(Check(name, False, str(failure)))
        except (httpx.HTTPError, WebSocketException, OSError, ValueError) as error:
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


def verify_backends(workdir: Path, mongo_url: str | None = None) -> Backends:
    """A small file set on disk and in GridFS, and memcached holding the memcached-proxy
    study's value: what the `/files`, `/gridfs` and `/mc` checks need, started once for every
    server verified."""
    return Backends(
        KINDS, mongo_url=mongo_url, file_count=VERIFY_FILE_COUNT, files_dir=workdir / "files"
    )


def backend_checks(backends: Backends, mc_port: int) -> dict[str, Callable[[str], str]]:
    fileset = backends.fileset
    return {
        "files": lambda url: check_file_route(url, fileset, contract.ROUTE_FILES_PREFIX),
        "gridfs": lambda url: check_file_route(url, fileset, contract.ROUTE_GRIDFS_PREFIX),
        "memcached": check_memcached_route,
        "memcached-socket": lambda url: check_memcached_socket(mc_port),
    }


BACKEND_CHECK_ROUTES = {
    "files": contract.ROUTE_FILES_PREFIX,
    "gridfs": contract.ROUTE_GRIDFS_PREFIX,
    "memcached": contract.ROUTE_MEMCACHED_PREFIX,
    "memcached-socket": contract.ROUTE_MEMCACHED_PREFIX,
}


def check_file_route(base_url: str, fileset: Any, prefix: str) -> str:
    """Three files of the set: exact bytes, Content-Type, Length; a traversal is 404."""
    from servers.core import static

    names = fileset.names[:3]
    with httpx.Client(base_url=base_url, timeout=10) as client:
        for name in names:
            reply = client.get(prefix + name)
            _expect(reply.status_code == 200, f"{prefix}{name} answered {reply.status_code}")
            data = (fileset.directory / name).read_bytes()
            _expect(reply.content == data, f"{prefix}{name}: body differs from the file")
            kind = reply.headers.get("content-type", "").split(";")[0]
            _expect(kind == static.content_type(name), f"{prefix}{name}: Content-Type {kind}")
        escape = client.get(prefix + "..%2f..%2fetc%2fpasswd")
        _expect(escape.status_code == 404, f"a traversal answered {escape.status_code}")
        missing = client.get(prefix + "img-99999.jpg")
        _expect(missing.status_code == 404, f"a missing file answered {missing.status_code}")
    return f"{len(names)} files byte-exact, traversal and missing 404"


def check_memcached_route(base_url: str) -> str:
    with httpx.Client(base_url=base_url, timeout=10) as client:
        hit = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        _expect(hit.status_code == 200 and hit.content == MC_VALUE, f"hit: {hit.status_code}")
        miss = client.get(contract.ROUTE_MEMCACHED_PREFIX + "verify-missing-key")
        _expect(miss.status_code == 404, f"a miss answered {miss.status_code}")
    return "hit returns the 100-byte value, miss 404"


def check_memcached_socket(mc_port: int) -> str:
    import socket

    from servers.core import memcache

    _expect(mc_port > 0, "no mc_port in the telemetry line")
    with socket.create_connection(("127.0.0.1", mc_port), 5) as sock:
        sock.sendall(memcache.get_request(MC_KEY.encode()))
        buffer = b""
        reply = None
        while reply is None:
            chunk = sock.recv(65536)
            _expect(bool(chunk), "the socket service closed the connection")
            buffer += chunk
            reply = memcache.parse_get_reply(buffer)
    _expect(reply[0] == MC_VALUE, f"get answered {buffer[:60]!r}")
    return f"get {MC_KEY} on port {mc_port}"


def verify_framework(
    framework: str,
    sink: str = "empty",
    cpus: str | None = None,
    mongo_url: str | None = None,
    backends: Backends | None = None,
) -> Verification:
    """Start `framework` with `sink`, run every check of the routes it serves (with
    `backends`: files, GridFS, memcached too), stop it (exit status checked too)."""
    if sink not in FRAMEWORKS[framework].sinks:
        return Verification(framework, sink, skipped=f"{framework} has no {sink} sink")
    try:
        store = SinkStore(sink, mongo_url=mongo_url)
    except UserError as error:
        return Verification(framework, sink, error=str(error))
    served = FRAMEWORKS[framework]
    with store:
        args = store.server_args()
        if backends is not None:
            if sink == "mongo":  # one --mongo-url: GridFS goes into the sink's database too
                backends.load_gridfs_into(str(store.mongo_url))
            args += backends.server_args(args)
        try:
            server = start_server(framework, sink=sink, cpus=cpus, extra_args=args)
        except Exception as error:  # a server that cannot start is a failed verification
            return Verification(framework, sink, error=str(error))
        try:
            checks = run_checks(server.url, checks_for(framework)) + not_supported(framework)
            if sink != "empty":
                checks += run_checks(
                    server.url, {"sink-record": lambda url: check_sink_record(url, store)}
                )
            if backends is not None:
                mc_port = int(server.telemetry_lines()[0].get("mc_port") or 0)
                for name, check in backend_checks(backends, mc_port).items():
                    if served.serves(BACKEND_CHECK_ROUTES[name]):
                        checks += run_checks(server.url, {name: check})
                    else:
                        route = BACKEND_CHECK_ROUTES[name]
                        checks += (Check(name, True, f"not supported ({route})", False),)
        finally:
            status = server.stop()
    stopped = Check("sigterm", status == 0, f"exit status {status}")
    return Verification(
        framework, sink, (*checks, check_telemetry(server.telemetry_lines()), stopped)
    )

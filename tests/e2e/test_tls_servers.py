"""TLS and HTTP/2 on the Python servers (docs/contract.md, "Protocols").

Each server is started as the harness starts it (`python -m servers NAME --protocol P
--tls-cert C --tls-key K`) with a throwaway CA's certificate (harness.tls), and spoken to
by real clients trusting only that CA: httpx (HTTP/1.1 and HTTP/2), Python's ssl for what
the handshake agreed (TLS 1.3, the ALPN protocol), and a websockets client for wss://.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import websockets

from harness.server_command import protocol_args
from harness.server_process import ServerProcess, start_server
from harness.services.backends import Backends
from harness.services.fileset import FileSet
from harness.tls import Certificates, temporary_certificates
from harness.verify import MALFORMED_REQUESTS
from model.scenarios import MC_KEY, MC_VALUE
from servers import FRAMEWORKS, contract
from tests.helpers import mc_port, require_framework

PYTHON_SERVERS = ("gevent", "eventlet", "tornado", "twisted", "aiohttp")
TLS_SERVERS = tuple(name for name in PYTHON_SERVERS if "h1-tls" in FRAMEWORKS[name].protocols)
H2_SERVERS = tuple(name for name in PYTHON_SERVERS if "h2" in FRAMEWORKS[name].protocols)
TIMEOUT_S = 5.0
DEADLINE_S = 2.0  # the servers' slow-client deadlines here (--client-timeout-s)
WATCH_LIMIT_S = 4 * DEADLINE_S + 2.0  # how long a test waits before calling the server wrong


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    holder, made = temporary_certificates()
    with holder:
        yield made


def client_context(certificates: Certificates, alpn: list[str]) -> ssl.SSLContext:
    """A client trusting only the run's CA, offering `alpn`."""
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    context.set_alpn_protocols(alpn)
    return context


def handshake(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> tuple[str, str]:
    """(TLS version, selected ALPN protocol) of one handshake with the server."""
    with (
        socket.create_connection((host, port), timeout=TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        return str(tls.version()), str(tls.selected_alpn_protocol())


def tls_exchange(port: int, context: ssl.SSLContext, request: bytes) -> bytes:
    """Send raw bytes over TLS; everything that comes back until a close or a quiet 0.5 s."""
    chunks: list[bytes] = []
    with (
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        # Refused and closed before all of it was sent (200 kB of headers): the refusal
        # itself is still there to read.
        with contextlib.suppress(OSError):
            tls.sendall(request)
        tls.settimeout(0.5)
        try:
            while chunk := tls.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError, ssl.SSLError):
            pass
    return b"".join(chunks)


def wss_session(port: int, context: ssl.SSLContext) -> tuple[str | None, int]:
    """Open wss:///ws, send one record, close: (the subprotocol agreed, the close code)."""

    async def talk() -> tuple[str | None, int]:
        async with websockets.connect(
            f"wss://127.0.0.1:{port}{contract.ROUTE_WEBSOCKET}",
            ssl=context,
            server_hostname="localhost",
            origin=contract.WS_ORIGIN,
            subprotocols=[contract.WS_SUBPROTOCOL],
            open_timeout=TIMEOUT_S,
            close_timeout=TIMEOUT_S,
        ) as ws:
            await ws.send(json.dumps({"n": 1}))
            await ws.send("not json")  # the contract closes it with 1007
            await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)
            assert ws.close_code is not None
            return ws.subprotocol, ws.close_code

    return asyncio.run(talk())


@pytest.fixture(params=TLS_SERVERS, scope="module")
def h1_tls_server(
    request: pytest.FixtureRequest, certificates: Certificates, tmp_path_factory
) -> Iterator[tuple[ServerProcess, Path]]:
    """A Python server on h1-tls with the file sink (its file returned too)."""
    name = request.param
    require_framework(name)
    sink_path = tmp_path_factory.mktemp(name) / "records.jsonl"
    server = start_server(
        name,
        sink="file",
        extra_args=[
            "--sink-path",
            str(sink_path),
            "--client-timeout-s",
            str(DEADLINE_S),
        ],
        protocol="h1-tls",
        certificates=certificates,
    )
    yield server, sink_path
    status = server.stop()
    assert status == 0, f"{name} exited {status}: {server.stderr_tail()}"


def test_h1_tls_handshake_is_tls13_with_http11_alpn(h1_tls_server, certificates) -> None:
    server, _ = h1_tls_server
    # Offered h2 first: an h1-tls server must still choose HTTP/1.1.
    version, alpn = handshake(server.port, client_context(certificates, ["h2", "http/1.1"]))
    assert (version, alpn) == (contract.TLS_MINIMUM_VERSION, "http/1.1")


def test_h1_tls_refuses_tls12(h1_tls_server, certificates) -> None:
    server, _ = h1_tls_server
    context = client_context(certificates, ["http/1.1"])
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake(server.port, context)


def test_unfinished_handshake_is_closed_by_the_head_deadline(h1_tls_server, certificates) -> None:
    """A client that starts a TLS handshake and stops is closed like one sending no head."""
    server, _ = h1_tls_server
    with socket.create_connection(("127.0.0.1", server.port), timeout=WATCH_LIMIT_S) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, no more
        try:
            while sock.recv(65536):
                pass  # an alert, maybe: then the close
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail(f"{server.framework} kept the connection past {WATCH_LIMIT_S} s")
    assert handshake(server.port, client_context(certificates, ["http/1.1"]))[1] == "http/1.1"


def test_a_plaintext_request_on_the_tls_port_is_closed_quietly(h1_tls_server, certificates) -> None:
    """Cleartext HTTP on the TLS port: closed (a TLS alert at most), no traceback or warning
    on stderr, as for cleartext garbage, and the server keeps serving."""
    server, _ = h1_tls_server
    with socket.create_connection(("127.0.0.1", server.port), timeout=WATCH_LIMIT_S) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            while reply := sock.recv(65536):
                assert not reply.startswith(b"HTTP/"), reply[:40]  # never answered in clear
        except ConnectionResetError:
            pass
    assert handshake(server.port, client_context(certificates, ["http/1.1"]))[1] == "http/1.1"
    stderr = server.stderr_tail(100_000)
    assert "Traceback" not in stderr and "SSL" not in stderr, stderr[-400:]


def test_h1_tls_routes(h1_tls_server, certificates) -> None:
    """/, /counter and /log with the file sink, over one kept-alive TLS connection."""
    server, sink_path = h1_tls_server
    with httpx.Client(
        base_url=f"https://localhost:{server.port}",
        verify=client_context(certificates, ["http/1.1"]),
        timeout=TIMEOUT_S,
    ) as client:
        text = client.get(contract.ROUTE_TEXT)
        assert (text.status_code, text.content, text.http_version) == (
            200,
            contract.TEXT_BODY,
            "HTTP/1.1",
        )
        assert text.headers["content-type"].startswith(contract.TEXT_CONTENT_TYPE)
        counter = client.get(contract.ROUTE_COUNTER).json()
        assert counter["open"] >= 1 and counter["requests"] >= 2
        logged = client.post(contract.ROUTE_LOG, content=b'{"over": "tls"}')
        assert (logged.status_code, logged.content) == (200, contract.LOG_REPLY_BODY)
    records = [json.loads(line) for line in sink_path.read_text().splitlines()]
    assert any(record["body"] == '{"over": "tls"}' for record in records)


@pytest.mark.slow  # the conformance matrix's `malformed` over h1-tls runs them by default
@pytest.mark.parametrize(
    ("name", "request_bytes", "accepted"),
    MALFORMED_REQUESTS,
    ids=[m[0] for m in MALFORMED_REQUESTS],
)
def test_malformed_requests_over_tls_are_refused_alike(
    h1_tls_server, certificates, name: str, request_bytes: bytes, accepted: tuple[int, ...]
) -> None:
    """The parser is the cleartext one: each malformed request gets one refusal."""
    server, _ = h1_tls_server
    reply = tls_exchange(server.port, client_context(certificates, ["http/1.1"]), request_bytes)
    assert reply.startswith(b"HTTP/1."), f"{name}: {reply[:80]!r}"
    assert int(reply.split(b" ", 2)[1]) in accepted, f"{name}: {reply[:80]!r}"
    assert reply.count(b"HTTP/1.1 200") == 0, f"{name}: a smuggled request was answered"


def test_h1_tls_files(h1_tls_server, certificates, fileset: FileSet) -> None:
    """/files is served over TLS (a server started with --files-dir)."""
    server, _ = h1_tls_server
    name = server.framework
    files = start_server(
        name,
        extra_args=["--files-dir", str(fileset.directory)],
        protocol="h1-tls",
        certificates=certificates,
    )
    with files:
        some = sorted(fileset.directory.iterdir())[0]
        reply = httpx.get(
            f"https://127.0.0.1:{files.port}{contract.ROUTE_FILES_PREFIX}{some.name}",
            verify=client_context(certificates, ["http/1.1"]),
            timeout=TIMEOUT_S,
        )
        assert (reply.status_code, reply.content) == (200, some.read_bytes())


@pytest.mark.parametrize("protocol", ["h1-tls", "h2"])
@pytest.mark.parametrize("name", TLS_SERVERS)
def test_backends_over_tls(
    name: str, protocol: str, certificates: Certificates, backends: Backends
) -> None:
    """/files, /gridfs and /mc answer over TLS (and HTTP/2) as in cleartext; the memcached
    socket service beside them stays cleartext."""
    if protocol not in FRAMEWORKS[name].protocols:
        pytest.skip(f"{name} does not speak {protocol}")
    require_framework(name)
    assert backends.fileset is not None
    some = backends.fileset.names[0]
    expected = (backends.fileset.directory / some).read_bytes()
    server = start_server(
        name, extra_args=backends.server_args([]), protocol=protocol, certificates=certificates
    )
    with (
        server,
        httpx.Client(
            base_url=f"https://localhost:{server.port}",
            http1=protocol == "h1-tls",
            http2=protocol == "h2",
            verify=client_context(certificates, [contract.ALPN_FOR_PROTOCOL[protocol]]),
            timeout=TIMEOUT_S,
        ) as client,
    ):
        for route in (contract.ROUTE_FILES_PREFIX, contract.ROUTE_GRIDFS_PREFIX):
            reply = client.get(route + some)
            assert (reply.status_code, reply.content) == (200, expected), route
            assert client.get(route + "missing.txt").status_code == 404, route
        value = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        assert (value.status_code, value.content) == (200, MC_VALUE)
        assert value.http_version == ("HTTP/2" if protocol == "h2" else "HTTP/1.1")
        with socket.create_connection(("127.0.0.1", mc_port(server)), timeout=TIMEOUT_S) as sock:
            sock.sendall(b"get " + MC_KEY.encode() + b"\r\n")
            assert sock.recv(65536).startswith(b"VALUE " + MC_KEY.encode())


def test_wss_handshake_and_close_codes(h1_tls_server, certificates) -> None:
    """/ws over TLS: the subprotocol is agreed and bad input closes with the contract's code."""
    server, _ = h1_tls_server
    subprotocol, close_code = wss_session(server.port, client_context(certificates, ["http/1.1"]))
    assert subprotocol == contract.WS_SUBPROTOCOL
    assert close_code == contract.WS_CLOSE_INVALID_PAYLOAD


def test_telemetry_counts_tls_requests(h1_tls_server, certificates) -> None:
    server, _ = h1_tls_server
    before = server.latest_telemetry()
    seen = sum(line["requests"] for line in before.values())
    with httpx.Client(verify=client_context(certificates, ["http/1.1"]), timeout=TIMEOUT_S) as c:
        for _ in range(5):
            assert c.get(f"https://127.0.0.1:{server.port}/").status_code == 200
    later = server.wait_telemetry(lambda line: line["requests"] >= seen + 5, TIMEOUT_S + 2)
    assert later is not None, server.telemetry_lines()[-3:]


@pytest.mark.parametrize("name", [n for n in TLS_SERVERS if "uvloop" in FRAMEWORKS[n].loops])
def test_h1_tls_on_uvloop(name: str, certificates: Certificates) -> None:
    """uvloop's TLS transport: the same handshake and reply as asyncio's."""
    require_framework(name)
    if "uvloop" not in FRAMEWORKS[name].usable_loops():
        pytest.skip("uvloop is not installed")
    with start_server(name, loop="uvloop", protocol="h1-tls", certificates=certificates) as server:
        context = client_context(certificates, ["h2", "http/1.1"])
        assert handshake(server.port, context) == (contract.TLS_MINIMUM_VERSION, "http/1.1")
        reply = httpx.get(f"https://localhost:{server.port}/", verify=context, timeout=TIMEOUT_S)
        assert (reply.status_code, reply.content) == (200, contract.TEXT_BODY)


@pytest.mark.parametrize("name", PYTHON_SERVERS)
def test_unsupported_protocol_is_one_line(name: str, certificates: Certificates) -> None:
    """A protocol a server does not speak is refused before it starts, in one line."""
    framework = FRAMEWORKS[name]
    refused = [p for p in contract.PROTOCOLS if p not in framework.protocols]
    if not refused:
        pytest.skip(f"{name} speaks every protocol")
    protocol = refused[0]
    args = protocol_args(protocol, certificates)
    done = subprocess.run(
        [sys.executable, "-m", "servers", name, *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2
    assert lines[-1].endswith(f"{name} does not speak {protocol}: {framework.why_not(protocol)}")
    assert framework.protocol_notes.get(protocol), f"{name}: no reason given for {protocol}"


@pytest.mark.parametrize("name", TLS_SERVERS)
def test_a_key_that_does_not_match_is_one_line(name: str, certificates: Certificates) -> None:
    """The CA's certificate with the server's key: refused at start, in one line."""
    require_framework(name)
    mismatched = ["--tls-cert", str(certificates.ca_path), "--tls-key", str(certificates.key_path)]
    done = subprocess.run(
        [sys.executable, "-m", "servers", name, "--protocol", "h1-tls", *mismatched],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"servers: TLS certificate {certificates.ca_path} with key"), last
    assert "Traceback" not in done.stderr


# -- HTTP/2 ---------------------------------------------------------------------------
@pytest.fixture(params=H2_SERVERS, scope="module")
def h2_server(
    request: pytest.FixtureRequest, certificates: Certificates, fileset: FileSet
) -> Iterator[ServerProcess]:
    """A server on h2 with the file sink and the test file set."""
    require_framework(request.param)
    with tempfile.TemporaryDirectory() as directory:
        server = start_server(
            request.param,
            sink="file",
            extra_args=[
                "--sink-path",
                str(Path(directory) / "records.jsonl"),
                "--files-dir",
                str(fileset.directory),
                "--client-timeout-s",
                str(DEADLINE_S),
            ],
            protocol="h2",
            certificates=certificates,
        )
        yield server
        status = server.stop()
        assert status == 0, f"{request.param} exited {status}: {server.stderr_tail()}"


def h2_client(base_url: str, verify: ssl.SSLContext | bool = False) -> httpx.Client:
    """An HTTP/2-only client: over TLS by ALPN, over cleartext with prior knowledge."""
    return httpx.Client(
        base_url=base_url, http1=False, http2=True, verify=verify, timeout=TIMEOUT_S
    )


def test_h2_unfinished_handshake_is_closed(h2_server: ServerProcess) -> None:
    """HTTP/2's idle timer (the head timeout) closes a connection still in its handshake."""
    with socket.create_connection(("127.0.0.1", h2_server.port), timeout=WATCH_LIMIT_S) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, no more
        try:
            while sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            pytest.fail(f"{h2_server.framework} kept the connection past {WATCH_LIMIT_S} s")


def test_h2_alpn(h2_server: ServerProcess, certificates: Certificates) -> None:
    version, alpn = handshake(h2_server.port, client_context(certificates, ["h2", "http/1.1"]))
    assert (version, alpn) == (contract.TLS_MINIMUM_VERSION, "h2")


def test_h2_routes(h2_server: ServerProcess, certificates: Certificates, fileset) -> None:
    """/, /counter, /log and /files over HTTP/2, several streams on one connection."""
    url = f"https://localhost:{h2_server.port}"
    with h2_client(url, client_context(certificates, ["h2"])) as client:
        for _ in range(3):
            text = client.get(contract.ROUTE_TEXT)
            assert (text.http_version, text.status_code, text.content) == (
                "HTTP/2",
                200,
                contract.TEXT_BODY,
            )
        counter = client.get(contract.ROUTE_COUNTER)
        assert counter.http_version == "HTTP/2"
        assert counter.json()["open"] == 1 and counter.json()["requests"] >= 4
        logged = client.post(contract.ROUTE_LOG, content=b'{"over": "h2"}')
        assert (logged.status_code, logged.content) == (200, contract.LOG_REPLY_BODY)
        some = sorted(fileset.directory.iterdir())[0]
        served = client.get(contract.ROUTE_FILES_PREFIX + some.name)
        assert (served.status_code, served.content) == (200, some.read_bytes())
        assert client.get("/nope").status_code == 404


def test_h2_body_over_the_limit_is_refused_and_the_connection_lives(
    h2_server: ServerProcess, certificates: Certificates
) -> None:
    url = f"https://localhost:{h2_server.port}"
    with h2_client(url, client_context(certificates, ["h2"])) as client:
        too_big = client.post(contract.ROUTE_LOG, content=b"x" * (contract.LOG_MAX_BODY_BYTES + 1))
        assert too_big.status_code == 413
        after = client.get(contract.ROUTE_TEXT)
        assert (after.status_code, after.content) == (200, contract.TEXT_BODY)


def test_ws_over_h2_is_refused(h2_server: ServerProcess, certificates: Certificates) -> None:
    """No RFC 8441 WebSocket over HTTP/2: a GET /ws there gets 400, not a 500."""
    url = f"https://localhost:{h2_server.port}"
    with h2_client(url, client_context(certificates, ["h2"])) as client:
        reply = client.get(
            contract.ROUTE_WEBSOCKET,
            headers={"origin": contract.WS_ORIGIN, "sec-websocket-protocol": "myprotocol"},
        )
        assert reply.status_code == 400


H2C_SERVERS = tuple(name for name in PYTHON_SERVERS if "h2c" in FRAMEWORKS[name].protocols)


@pytest.mark.parametrize("name", H2C_SERVERS)
def test_h2c_prior_knowledge(name: str) -> None:
    """Cleartext HTTP/2: the client's preface first, no upgrade."""
    require_framework(name)
    with start_server(name, protocol="h2c") as server:
        with h2_client(f"http://127.0.0.1:{server.port}") as client:
            for _ in range(2):
                text = client.get(contract.ROUTE_TEXT)
                assert (text.http_version, text.status_code, text.content) == (
                    "HTTP/2",
                    200,
                    contract.TEXT_BODY,
                )
            assert client.get(contract.ROUTE_COUNTER).json()["open"] == 1
        closed = server.wait_telemetry(lambda line: line["requests"] >= 3 and line["open"] == 0)
        assert closed is not None, server.telemetry_lines()[-2:]
        # An HTTP/2 connection left open does not hold the shutdown past the grace.
        with h2_client(f"http://127.0.0.1:{server.port}") as client:
            assert client.get(contract.ROUTE_TEXT).status_code == 200
            assert server.stop() == 0, server.stderr_tail()

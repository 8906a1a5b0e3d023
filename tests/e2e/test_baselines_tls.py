"""The baselines over every protocol they list (servers.FRAMEWORKS `protocols`): TLS 1.3 with
the case's ALPN, HTTP/2 over TLS, HTTP/2 with prior knowledge (h2c), and their routes.

Each server is started as the harness starts it (`python -m servers NAME --protocol P
--tls-cert PEM --tls-key PEM`) with a throwaway CA's certificate (harness.tls), and spoken
to by clients that trust only that CA: Python's ssl, httpx (HTTP/2 through its `h2`
extra) and the `h2` library's frames over a plain socket for h2c. Loopback only.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from harness.server_process import ServerProcess, protocol_args, start_server
from harness.services.backends import Backends
from harness.services.fileset import FileSet
from harness.services.memcached import Memcached
from harness.services.sink_store import SinkStore
from harness.tls import Certificates, temporary_certificates
from model.scenarios import MC_KEY, MC_VALUE
from servers import FRAMEWORKS, NODE_DIR, contract
from tests.helpers import mc_port, require_framework, require_tool

TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    """A throwaway CA and a loopback certificate for this module's servers."""
    holder, made = temporary_certificates()
    with holder:
        yield made


def start(
    framework: str,
    protocol: str,
    certificates: Certificates,
    extra_args: Sequence[str] = (),
    sink: str = "empty",
) -> ServerProcess:
    """`framework` speaking `protocol` (skipped when it is not installed)."""
    require_framework(framework)
    return start_server(
        framework, sink=sink, extra_args=extra_args, protocol=protocol, certificates=certificates
    )


def client_context(certificates: Certificates, alpn: Sequence[str] | None) -> ssl.SSLContext:
    """A client context trusting only the test CA, offering `alpn` (None: no ALPN at all)."""
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    if alpn is not None:
        context.set_alpn_protocols(list(alpn))
    return context


@dataclass(frozen=True)
class Handshake:
    version: str | None
    alpn: str | None


def handshake(
    port: int, context: ssl.SSLContext, server_name: str = "localhost", host: str = "127.0.0.1"
) -> Handshake:
    """One TLS handshake: the version and the ALPN protocol the server chose."""
    with (
        socket.create_connection((host, port), timeout=TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        return Handshake(tls.version(), tls.selected_alpn_protocol())


def assert_tls_refused(port: int, context: ssl.SSLContext) -> None:
    """The handshake fails with an alert (no version or protocol in common)."""
    with pytest.raises(ssl.SSLError):
        handshake(port, context)


def tls12_only(certificates: Certificates) -> ssl.SSLContext:
    context = client_context(certificates, ["http/1.1", "h2"])
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


def https_client(server: ServerProcess, certificates: Certificates, http2: bool) -> httpx.Client:
    """httpx trusting only the test CA; with `http2` it offers h2 (and http/1.1) by ALPN."""
    return httpx.Client(
        base_url=f"https://localhost:{server.port}",
        verify=client_context(certificates, None),
        http1=not http2,
        http2=http2,
        timeout=TIMEOUT_S,
    )


@dataclass(frozen=True)
class H2Request:
    path: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    end_stream: bool = True  # False: the body is only the start of what the headers declare


@dataclass(frozen=True)
class H2Response:
    status: int
    headers: dict[str, str]
    body: bytes
    reset_code: int | None = None  # the server's RST_STREAM after (or instead of) the answer


def h2c_exchange(
    port: int, requests: Sequence[H2Request | str], timeout_s: float = TIMEOUT_S
) -> list[H2Response]:
    """Send every request on one cleartext HTTP/2 connection with prior knowledge (RFC 9113
    section 3.3): the preface first, one stream per request (a str: GET that path), all
    sent before any answer is read; each answer once its stream ended or was reset."""
    import h2.config
    import h2.connection
    import h2.events

    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    heads: dict[int, dict[str, str]] = {}
    bodies: dict[int, bytes] = {}
    resets: dict[int, int] = {}
    done: set[int] = set()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        connection.initiate_connection()
        streams = []
        for request in requests:
            if isinstance(request, str):
                request = H2Request(request)
            stream = connection.get_next_available_stream_id()
            head = [
                (":method", request.method),
                (":scheme", "http"),
                (":authority", f"127.0.0.1:{port}"),
                (":path", request.path),
                *request.headers,
            ]
            connection.send_headers(
                stream, head, end_stream=request.end_stream and not request.body
            )
            for start in range(0, len(request.body), 16_384):  # the default largest frame
                last = start + 16_384 >= len(request.body)
                chunk = request.body[start : start + 16_384]
                connection.send_data(stream, chunk, end_stream=last and request.end_stream)
            streams.append(stream)
            bodies[stream] = b""
        sock.sendall(connection.data_to_send())
        deadline = time.monotonic() + timeout_s
        while not done >= set(streams):
            assert time.monotonic() < deadline, f"h2c: {len(done)} of {len(streams)} answered"
            data = sock.recv(65536)
            assert data, f"h2c: closed after {len(done)} of {len(streams)} answers"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    heads[event.stream_id] = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    connection.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
                elif isinstance(event, h2.events.StreamEnded):
                    done.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    resets[event.stream_id] = event.error_code
                    done.add(event.stream_id)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise AssertionError(f"h2c: {event}")
            sock.sendall(connection.data_to_send())
    answers = []
    for stream in streams:
        head = heads.get(stream, {})  # none when the stream was reset unanswered
        status = int(head.pop(":status", 0))
        answers.append(H2Response(status, head, bodies[stream], resets.get(stream)))
    return answers


def h1_request_answer(port: int) -> bytes:
    """What a cleartext HTTP/1.1 request gets back (until close or TIMEOUT_S of silence)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            return sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return b""


def assert_text(status: int, content_type: str, body: bytes) -> None:
    assert status == 200
    assert content_type == contract.TEXT_CONTENT_TYPE
    assert body == contract.TEXT_BODY


def run_servers(framework: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m servers FRAMEWORK ARGS` for a server that must refuse to start."""
    require_framework(framework)
    return subprocess.run(
        [sys.executable, "-m", "servers", framework, *args],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


# -- nginx -------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", [contract.PROTOCOL_H1_TLS, contract.PROTOCOL_H2])
def test_nginx_over_tls_serves_its_routes_with_tls13_and_the_case_alpn(
    protocol: str, certificates: Certificates, fileset: FileSet
) -> None:
    extra = ["--files-dir", str(fileset.directory)]
    with start("nginx", protocol, certificates, extra) as server:
        alpn = contract.ALPN_FOR_PROTOCOL[protocol]
        chosen = handshake(server.port, client_context(certificates, ["h2", "http/1.1"]))
        assert chosen == Handshake(contract.TLS_MINIMUM_VERSION, alpn)
        # The certificate covers the address as well as the name (TLS_SERVER_NAMES).
        by_address = handshake(server.port, client_context(certificates, [alpn]), "127.0.0.1")
        assert by_address.alpn == alpn
        assert_tls_refused(server.port, tls12_only(certificates))
        name = fileset.names[0]
        with https_client(server, certificates, http2=protocol == contract.PROTOCOL_H2) as client:
            text = client.get(contract.ROUTE_TEXT)
            assert text.http_version == (
                "HTTP/2" if protocol == contract.PROTOCOL_H2 else "HTTP/1.1"
            )
            assert_text(text.status_code, text.headers["content-type"], text.content)
            assert text.headers["server"] and text.headers["date"]
            file = client.get(contract.ROUTE_FILES_PREFIX + name)
            assert file.status_code == 200
            assert file.content == (fileset.directory / name).read_bytes()
            assert client.get(contract.ROUTE_FILES_PREFIX + ".hidden").status_code == 404
            assert client.get("/nope").status_code == 404
            before = server.latest_telemetry()[server.pid]["requests"]
            for _ in range(5):
                client.get(contract.ROUTE_TEXT)
            # stub_status counts the TLS connection's requests as it counts cleartext ones
            counted = server.wait_telemetry(lambda line: line["requests"] >= before + 5)
            assert counted is not None, server.telemetry_lines()[-2:]
            assert counted["open"] >= 1
        assert server.stop() == 0, server.stderr_tail()


def test_nginx_h1_tls_refuses_a_client_that_offers_only_h2(certificates: Certificates) -> None:
    with start("nginx", contract.PROTOCOL_H1_TLS, certificates) as server:
        assert_tls_refused(server.port, client_context(certificates, ["h2"]))
        # A client that offers no ALPN at all is served HTTP/1.1 over TLS 1.3.
        assert handshake(server.port, client_context(certificates, None)) == Handshake(
            contract.TLS_MINIMUM_VERSION, None
        )


def test_nginx_h2_falls_back_to_http11_for_a_client_offering_only_it(
    certificates: Certificates,
) -> None:
    """nginx 1.22 offers h2 and http/1.1 on an `ssl http2` listener and has no directive to
    offer h2 alone (docs/contract.md, "Protocols"): a client must offer h2 to measure it."""
    with start("nginx", contract.PROTOCOL_H2, certificates) as server:
        offered = handshake(server.port, client_context(certificates, ["http/1.1"]))
        assert offered == Handshake(contract.TLS_MINIMUM_VERSION, "http/1.1")


def test_nginx_h2c_speaks_http2_with_prior_knowledge_only(
    certificates: Certificates, fileset: FileSet
) -> None:
    extra = ["--files-dir", str(fileset.directory)]
    with start("nginx", contract.PROTOCOL_H2C, certificates, extra) as server:
        name = fileset.names[1]
        paths = [contract.ROUTE_TEXT] * 3 + [contract.ROUTE_FILES_PREFIX + name, "/nope"]
        *texts, file, missing = h2c_exchange(server.port, paths)
        for text in texts:
            assert_text(text.status, text.headers["content-type"], text.body)
        assert file.status == 200 and file.body == (fileset.directory / name).read_bytes()
        assert missing.status == 404
        # Not HTTP/1.1: nginx answers the request line with HTTP/2 frames (its SETTINGS).
        assert not h1_request_answer(server.port).startswith(b"HTTP/1.1")
        counted = server.wait_telemetry(lambda line: line["requests"] >= len(paths))
        assert counted is not None, server.telemetry_lines()[-2:]
        assert server.stop() == 0, server.stderr_tail()


# -- EventMachine ------------------------------------------------------------------------
def test_em_h1_tls_serves_tls13_without_alpn(certificates: Certificates) -> None:
    """EventMachine's start_tls has no ALPN: whatever a client offers, the server answers
    none, and the client speaks HTTP/1.1 (docs/contract.md, "Protocols")."""
    with start("eventmachine", contract.PROTOCOL_H1_TLS, certificates) as server:
        for offered in (["http/1.1"], ["h2", "http/1.1"], None):
            chosen = handshake(server.port, client_context(certificates, offered))
            assert chosen == Handshake(contract.TLS_MINIMUM_VERSION, None), offered
        assert_tls_refused(server.port, tls12_only(certificates))
        with https_client(server, certificates, http2=False) as client:
            text = client.get(contract.ROUTE_TEXT)
            assert_text(text.status_code, text.headers["content-type"], text.content)
            assert text.headers["server"].startswith("EventMachine/")
            counter = client.get(contract.ROUTE_COUNTER)  # the same kept-alive connection
            assert counter.json()["open"] == 1
            assert counter.json()["requests"] >= 2
        assert server.stop() == 0, server.stderr_tail()


def test_em_refuses_http2_and_a_key_that_is_not_the_certificate(
    certificates: Certificates,
) -> None:
    refused = run_servers("eventmachine", "--protocol", contract.PROTOCOL_H2C)
    assert refused.returncode == 2
    assert "EventMachine has no HTTP/2" in refused.stderr, refused.stderr
    holder, other = temporary_certificates()
    with holder:
        mismatched = run_servers(
            "eventmachine",
            *("--protocol", contract.PROTOCOL_H1_TLS, "--tls-cert", str(certificates.cert_path)),
            *("--tls-key", str(other.key_path)),
        )
    assert mismatched.returncode == 1
    assert "was not issued for" in mismatched.stderr, mismatched.stderr


# -- Node (node-http, node-express) ------------------------------------------------------
NODE_TLS_CASES = [
    ("node-http", contract.PROTOCOL_H1_TLS),
    ("node-http", contract.PROTOCOL_H2),
    ("node-express", contract.PROTOCOL_H1_TLS),
]


@pytest.mark.parametrize(("framework", "protocol"), NODE_TLS_CASES)
def test_node_tls_offers_only_the_case_alpn_over_tls13(
    framework: str, protocol: str, certificates: Certificates
) -> None:
    with start(framework, protocol, certificates) as server:
        alpn = contract.ALPN_FOR_PROTOCOL[protocol]
        other = "h2" if alpn == "http/1.1" else "http/1.1"
        chosen = handshake(server.port, client_context(certificates, [other, alpn]))
        assert chosen == Handshake(contract.TLS_MINIMUM_VERSION, alpn)
        by_address = handshake(server.port, client_context(certificates, [alpn]), "127.0.0.1")
        assert by_address.alpn == alpn
        # No quiet fallback: a client offering only the other protocol is refused.
        assert_tls_refused(server.port, client_context(certificates, [other]))
        assert_tls_refused(server.port, tls12_only(certificates))
        assert server.stop() == 0, server.stderr_tail()


@pytest.mark.parametrize(("framework", "protocol"), NODE_TLS_CASES)
def test_node_routes_and_the_file_sink_over_tls(
    framework: str, protocol: str, certificates: Certificates, fileset: FileSet
) -> None:
    """Only the listener changes: `/`, `/counter`, `/log` into the file sink, `/files/`
    and the telemetry are what they are over cleartext HTTP/1.1."""
    http2 = protocol == contract.PROTOCOL_H2
    with SinkStore("file") as store:
        extra = [*store.server_args(), "--files-dir", str(fileset.directory)]
        server = start(framework, protocol, certificates, extra, sink="file")
        with server, https_client(server, certificates, http2=http2) as client:
            text = client.get(contract.ROUTE_TEXT)
            assert text.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            assert_text(text.status_code, text.headers["content-type"], text.content)
            assert text.headers["server"].startswith("Node.js/") and text.headers["date"]
            counter = client.get(contract.ROUTE_COUNTER).json()
            assert counter["open"] == 1 and counter["requests"] >= 2  # one kept-alive connection
            for i in range(3):
                logged = client.post(contract.ROUTE_LOG, json={"i": i}, headers={"X-Test": str(i)})
                assert logged.status_code == 200 and logged.content == contract.LOG_REPLY_BODY
            name = fileset.names[2]
            file = client.get(contract.ROUTE_FILES_PREFIX + name)
            assert file.status_code == 200
            assert file.content == (fileset.directory / name).read_bytes()
            assert client.get(contract.ROUTE_FILES_PREFIX + ".hidden").status_code == 404
            assert client.get("/nope").status_code == 404
            assert client.put(contract.ROUTE_TEXT).status_code == 405
            counted = server.wait_telemetry(lambda line: line["stored"] >= 3)
            assert counted is not None, server.telemetry_lines()[-2:]
            assert server.stop() == 0, server.stderr_tail()
        assert store.count() == 3
        record = store.records(1)[0]
        assert json.loads(record["body"]) == {"i": 0}
        headers = {name.lower(): value for name, value in record["headers"].items()}
        assert headers["x-test"] == "0"
        # HTTP/2's pseudo-headers are the request line's, not headers of the record
        assert not any(name.startswith(":") for name in headers)


@pytest.mark.parametrize("framework", ["node-http", "node-express"])
def test_node_wss_over_h1_tls(framework: str, certificates: Certificates) -> None:
    """/ws over TLS (wss): the same handshake rules and messages, on the https server.
    verify's client (ws_connect): websockets' own wss socket lets its reader thread and the
    caller's writes into OpenSSL at once (harness.verify.websocket.OneThreadAtATimeTLS)."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    from harness.verify import endpoint_for
    from harness.verify.websocket import ws_connect

    with start(framework, contract.PROTOCOL_H1_TLS, certificates) as server:
        endpoint = endpoint_for(server.url, contract.PROTOCOL_H1_TLS, certificates)
        with ws_connect(endpoint) as ws:
            assert ws.subprotocol == contract.WS_SUBPROTOCOL
            for i in range(5):
                ws.send(json.dumps({"i": i}))
            ws.ping().wait(TIMEOUT_S)
            counted = server.wait_telemetry(lambda line: line["messages"] >= 5)
            assert counted is not None, server.telemetry_lines()[-2:]
            assert counted["open"] >= 1
            ws.send("not json")  # the contract's close code, over TLS as in cleartext
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=TIMEOUT_S)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == contract.WS_CLOSE_INVALID_PAYLOAD
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(endpoint, origin="elsewhere")
        assert refused.value.response.status_code == contract.WS_BAD_ORIGIN_STATUS
        assert server.stop() == 0, server.stderr_tail()


def test_node_backends_over_h1_tls(certificates: Certificates) -> None:
    """/mc through the memcached pool over TLS (a real memcached), and the memcached
    socket service, which stays memcached's own cleartext protocol."""
    require_tool("memcached")
    with Memcached() as memcached:
        memcached.set(MC_KEY, MC_VALUE)
        extra = ["--memcached", memcached.address, "--mc-socket-port", "0"]
        with (
            start("node-http", contract.PROTOCOL_H1_TLS, certificates, extra) as server,
            https_client(server, certificates, http2=False) as client,
        ):
            value = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
            assert value.status_code == 200 and value.content == MC_VALUE
            assert value.headers["content-type"] == contract.MC_CONTENT_TYPE
            assert client.get(contract.ROUTE_MEMCACHED_PREFIX + "missing").status_code == 404
            with socket.create_connection(("127.0.0.1", mc_port(server)), TIMEOUT_S) as sock:
                sock.sendall(f"get {MC_KEY}\r\n".encode())
                assert sock.recv(4096).startswith(b"VALUE " + MC_KEY.encode())
            assert server.stop() == 0, server.stderr_tail()


def test_node_gridfs_and_the_mongo_sink_over_h1_tls(
    certificates: Certificates, backends: Backends, fileset: FileSet
) -> None:
    with SinkStore("mongo", mongo_url=backends.mongo_url) as store:
        extra = [*store.server_args(), *backends.server_args(store.server_args())]
        server = start("node-http", contract.PROTOCOL_H1_TLS, certificates, extra, sink="mongo")
        with server, https_client(server, certificates, http2=False) as client:
            name = fileset.names[3]
            file = client.get(contract.ROUTE_GRIDFS_PREFIX + name)
            assert file.status_code == 200
            assert file.content == (fileset.directory / name).read_bytes()
            logged = client.post(contract.ROUTE_LOG, json={"over": "tls"})
            assert logged.status_code == 200
            assert server.stop() == 0, server.stderr_tail()
        assert store.count() == 1


def test_node_h2c_serves_streams_with_prior_knowledge(
    certificates: Certificates, fileset: FileSet
) -> None:
    extra = ["--files-dir", str(fileset.directory)]
    with start("node-http", contract.PROTOCOL_H2C, certificates, extra) as server:
        name = fileset.names[4]
        paths = [contract.ROUTE_TEXT] * 3 + [contract.ROUTE_COUNTER]
        paths += [contract.ROUTE_FILES_PREFIX + name, "/nope"]
        *texts, counter, file, missing = h2c_exchange(server.port, paths)
        for text in texts:
            assert_text(text.status, text.headers["content-type"], text.body)
            assert text.headers["server"].startswith("Node.js/")
        assert counter.status == 200 and json.loads(counter.body)["open"] == 1
        assert file.status == 200 and file.body == (fileset.directory / name).read_bytes()
        assert missing.status == 404
        # Prior knowledge only: an HTTP/1.1 request line is not served.
        assert not h1_request_answer(server.port).startswith(b"HTTP/1.1")
        assert server.stop() == 0, server.stderr_tail()


def test_node_h2_too_large_body_is_answered_413_and_its_stream_reset(
    certificates: Certificates,
) -> None:
    """Over HTTP/2 the contract's "413 and close" closes the stream, not the connection:
    the whole 413, then RST_STREAM NO_ERROR (stop sending the body); other streams go on."""
    declared = contract.LOG_MAX_BODY_BYTES + 1
    too_large = H2Request(
        contract.ROUTE_LOG,
        "POST",
        (("content-length", str(declared)),),
        b"x" * 32_768,
        end_stream=False,
    )
    with start("node-http", contract.PROTOCOL_H2C, certificates) as server:
        refused, text = h2c_exchange(server.port, [too_large, contract.ROUTE_TEXT])
        assert refused.status == 413
        assert int(refused.headers["content-length"]) == len(refused.body)
        assert "connection" not in refused.headers
        assert refused.reset_code == 0  # NO_ERROR
        assert_text(text.status, text.headers["content-type"], text.body)
        assert server.stop() == 0, server.stderr_tail()


def test_node_h2_sigterm_with_a_stream_in_flight_exits_0_in_time(
    certificates: Certificates,
) -> None:
    """A session whose client never finishes its request still lets the server stop: a
    GOAWAY, then its socket closed (node's session.destroy alone waits for the peer)."""
    import h2.config
    import h2.connection

    with start("node-http", contract.PROTOCOL_H2C, certificates) as server:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        with socket.create_connection(("127.0.0.1", server.port), TIMEOUT_S) as sock:
            connection.initiate_connection()
            head = [(":method", "POST"), (":scheme", "http"), (":authority", "x")]
            connection.send_headers(1, [*head, (":path", contract.ROUTE_LOG)])
            connection.send_data(1, b'{"never": "finished"')
            sock.sendall(connection.data_to_send())
            assert server.wait_telemetry(lambda line: line["open"] == 1) is not None
            started = time.monotonic()
            status = server.stop()
            assert status == 0, server.stderr_tail()
            assert time.monotonic() - started < contract.SHUTDOWN_GRACE_S


def test_node_express_refuses_http2_with_the_reason(certificates: Certificates) -> None:
    refused = run_servers("node-express", *protocol_args(contract.PROTOCOL_H2, certificates))
    assert refused.returncode == 2
    assert "Express 4" in refused.stderr, refused.stderr
    # server.js itself, as `python -m servers` execs it, refuses it too
    direct = subprocess.run(
        ["node", str(NODE_DIR / "server.js"), "node-express", "--protocol", contract.PROTOCOL_H2C],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert direct.returncode == 2
    assert "node-express speaks h1, h1-tls, not h2c" in direct.stderr, direct.stderr


# -- every baseline ----------------------------------------------------------------------
@pytest.mark.parametrize("framework", ["nginx", "node-http"])
def test_an_idle_http2_connection_is_closed(framework: str, certificates: Certificates) -> None:
    """An HTTP/2 connection that opens no stream is closed after the head timeout (nginx:
    client_header_timeout/keepalive_timeout, Node: its session timeout), with a GOAWAY."""
    import h2.config
    import h2.connection
    import h2.events

    extra = ["--client-timeout-s", "1"]
    with start(framework, contract.PROTOCOL_H2C, certificates, extra) as server:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        events: list[object] = []
        with socket.create_connection(("127.0.0.1", server.port), TIMEOUT_S) as sock:
            connection.initiate_connection()
            sock.sendall(connection.data_to_send())
            while data := sock.recv(65536):  # a TimeoutError here: never closed
                events += connection.receive_data(data)
                sock.sendall(connection.data_to_send())
        assert any(isinstance(event, h2.events.ConnectionTerminated) for event in events)
        assert server.stop() == 0, server.stderr_tail()


@pytest.mark.parametrize("framework", ["nginx", "node-http", "node-express", "eventmachine"])
def test_h1_tls_deadlines_close_a_silent_connection(
    framework: str, certificates: Certificates
) -> None:
    """The slow-client deadlines hold over TLS: a connection that never handshakes, one that
    sends half a ClientHello and stops (verify's `tls-half-handshake`, which the conformance
    matrix runs at the default 10 s only in the slow run), and one that handshakes and never
    sends a head, are all closed."""
    extra = ["--client-timeout-s", "1"]
    with start(framework, contract.PROTOCOL_H1_TLS, certificates, extra) as server:
        with socket.create_connection(("127.0.0.1", server.port), TIMEOUT_S) as silent:
            assert closed_by_peer(silent)
        with socket.create_connection(("127.0.0.1", server.port), TIMEOUT_S) as half:
            half.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, no more
            assert drained_to_close(half)
        context = client_context(certificates, ["http/1.1"])
        with (
            socket.create_connection(("127.0.0.1", server.port), TIMEOUT_S) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            assert closed_by_peer(tls)
        assert_text_over_tls(server, certificates)


def assert_text_over_tls(server: ServerProcess, certificates: Certificates) -> None:
    with https_client(server, certificates, http2=False) as client:
        text = client.get(contract.ROUTE_TEXT)
        assert_text(text.status_code, text.headers["content-type"], text.content)


def drained_to_close(sock: socket.socket, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether the server closes `sock` within `timeout_s`, whatever it sends first (an
    alert, say)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


def closed_by_peer(sock: socket.socket, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether the server closes `sock` within `timeout_s` (it reads nothing else)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


@pytest.mark.parametrize("framework", ["nginx", "eventmachine", "node-http"])
def test_a_certificate_that_does_not_load_is_refused_at_start(
    framework: str, certificates: Certificates, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.pem"
    broken.write_text("not a certificate\n")
    done = run_servers(
        framework,
        *("--protocol", contract.PROTOCOL_H1_TLS, "--tls-cert", str(broken)),
        *("--tls-key", str(certificates.key_path)),
    )
    assert done.returncode == 1
    assert "broken.pem" in done.stderr, done.stderr


def test_baseline_protocols_are_listed_with_reasons_for_the_rest() -> None:
    for name in ("nginx", "node-http", "node-express", "eventmachine"):
        framework = FRAMEWORKS[name]
        assert contract.PROTOCOL_H1 in framework.protocols
        for protocol in set(contract.PROTOCOLS) - set(framework.protocols):
            assert protocol in framework.protocol_notes, f"{name} {protocol}: no reason given"

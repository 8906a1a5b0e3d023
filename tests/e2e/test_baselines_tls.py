"""The baselines over every protocol they list (servers.FRAMEWORKS `protocols`): TLS 1.3 with
the case's ALPN, HTTP/2 over TLS, HTTP/2 with prior knowledge (h2c), and their routes.

Each server is started as the harness starts it (`python -m servers NAME --protocol P
--tls-cert PEM --tls-key PEM`) with a throwaway CA's certificate (harness.tls), and spoken
to by clients that trust only that CA: Python's ssl, httpx (HTTP/2 through its `h2`
extra) and the `h2` library's frames over a plain socket for h2c. Loopback only.
"""

from __future__ import annotations

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

from harness.fileset import FileSet
from harness.server_process import ServerProcess, start_server
from harness.tls import Certificates, temporary_certificates
from servers import contract
from tests.helpers import require_framework

TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    """A throwaway CA and a loopback certificate for this module's servers."""
    holder, made = temporary_certificates()
    with holder:
        yield made


def protocol_args(protocol: str, certificates: Certificates) -> list[str]:
    """`--protocol P` and, for a TLS protocol, the certificate and key to serve."""
    args = ["--protocol", protocol]
    if protocol in contract.TLS_PROTOCOLS:
        args += ["--tls-cert", str(certificates.cert_path), "--tls-key", str(certificates.key_path)]
    return args


def start(
    framework: str, protocol: str, certificates: Certificates, extra_args: Sequence[str] = ()
) -> ServerProcess:
    require_framework(framework)
    return start_server(framework, extra_args=[*protocol_args(protocol, certificates), *extra_args])


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
class H2Response:
    status: int
    headers: dict[str, str]
    body: bytes


def h2c_get(port: int, paths: Sequence[str], timeout_s: float = TIMEOUT_S) -> list[H2Response]:
    """GET every path on one cleartext HTTP/2 connection with prior knowledge (RFC 9113
    §3.3): the preface first, one stream per path, all sent before any answer is read."""
    import h2.config
    import h2.connection
    import h2.events

    connection = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    heads: dict[int, dict[str, str]] = {}
    bodies: dict[int, bytes] = {}
    ended: set[int] = set()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        connection.initiate_connection()
        streams = []
        for path in paths:
            stream = connection.get_next_available_stream_id()
            request = [
                (":method", "GET"),
                (":scheme", "http"),
                (":authority", f"127.0.0.1:{port}"),
                (":path", path),
            ]
            connection.send_headers(stream, request, end_stream=True)
            streams.append(stream)
            bodies[stream] = b""
        sock.sendall(connection.data_to_send())
        deadline = time.monotonic() + timeout_s
        while len(ended) < len(streams):
            assert time.monotonic() < deadline, f"h2c: {len(ended)} of {len(streams)} answered"
            data = sock.recv(65536)
            assert data, f"h2c: closed after {len(ended)} of {len(streams)} responses"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    heads[event.stream_id] = dict(event.headers)  # type: ignore[arg-type]
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    connection.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
                elif isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    raise AssertionError(f"h2c: {event}")
            sock.sendall(connection.data_to_send())
    return [H2Response(int(heads[s].pop(":status")), heads[s], bodies[s]) for s in streams]


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
        *texts, file, missing = h2c_get(server.port, paths)
        for text in texts:
            assert_text(text.status, text.headers["content-type"], text.body)
        assert file.status == 200 and file.body == (fileset.directory / name).read_bytes()
        assert missing.status == 404
        # Not HTTP/1.1: nginx answers the request line with HTTP/2 frames (its SETTINGS).
        assert not h1_request_answer(server.port).startswith(b"HTTP/1.1")
        counted = server.wait_telemetry(lambda line: line["requests"] >= len(paths))
        assert counted is not None, server.telemetry_lines()[-2:]
        assert server.stop() == 0, server.stderr_tail()


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


@pytest.mark.parametrize("framework", ["nginx", "eventmachine"])
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

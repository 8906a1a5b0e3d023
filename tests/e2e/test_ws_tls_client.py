"""verify's WebSocket client over TLS: its reads and writes take turns in OpenSSL, and a
read waiting for data never holds up a write (harness.verify.websocket.OneThreadAtATimeTLS).

A real TLS 1.3 server on loopback, in a thread: it takes one request and answers it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.tls import Certificates, client_context, make_certificates
from harness.verify.websocket import OneThreadAtATimeTLS
from servers import contract

WAIT_S = 5.0


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(Path(tmp_path_factory.mktemp("tls")))


class OneRequestServer:
    """Accepts one TLS connection (its session tickets go out with the handshake), reads
    one request, answers `answer` and closes."""

    def __init__(self, certificates: Certificates) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificates.cert_path, certificates.key_path)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        connection.settimeout(WAIT_S)
        with self.context.wrap_socket(connection, server_side=True) as tls:
            self.received.append(tls.recv(100))
            tls.sendall(b"answer")

    def close(self) -> None:
        self.thread.join(WAIT_S)
        self.listener.close()


@pytest.fixture
def server(certificates: Certificates) -> Iterator[OneRequestServer]:
    one = OneRequestServer(certificates)
    yield one
    one.close()


def tls_client(certificates: Certificates, port: int, timeout_s: float) -> OneThreadAtATimeTLS:
    context = client_context(certificates, contract.PROTOCOL_H1_TLS)
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    tls.settimeout(timeout_s)
    return OneThreadAtATimeTLS(tls)


def test_a_write_goes_out_while_another_thread_waits_to_read(
    certificates: Certificates, server: OneRequestServer
) -> None:
    sock = tls_client(certificates, server.port, timeout_s=WAIT_S)
    time.sleep(0.1)  # the session tickets have come: the reader takes them, then waits
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(sock.recv(100)))
    reader.start()
    time.sleep(0.1)
    started = time.monotonic()
    sock.sendall(b"request")
    reader.join(WAIT_S)
    sock.close()
    assert server.received == [b"request"]
    assert read == [b"answer"]
    # a turn held across the reader's wait would have kept the request until its timeout
    assert time.monotonic() - started < WAIT_S / 2


def test_a_read_with_nothing_coming_ends_at_the_timeout(
    certificates: Certificates, server: OneRequestServer
) -> None:
    sock = tls_client(certificates, server.port, timeout_s=0.3)
    with pytest.raises(TimeoutError):
        sock.recv(100)
    assert sock.gettimeout() == 0.3
    sock.settimeout(WAIT_S)  # as websockets does when it closes: the next wait is longer
    sock.sendall(b"late")
    assert sock.recv(100) == b"answer"
    sock.close()
    assert server.received == [b"late"]

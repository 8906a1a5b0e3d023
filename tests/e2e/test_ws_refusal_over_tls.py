"""A WebSocket handshake over TLS that gets no answer ends the check, even when the
client's reader is blocked inside TLS (the hang that held a CI run's `ws-subprotocol` check
against uvicorn over h1-tls for 300 s).

The server here is a real TLS endpoint on loopback that completes the TLS handshake (its
session tickets make the socket readable) and then never answers the HTTP request. The
WebSocket client's reader wakes for the tickets and blocks in the TLS read waiting for
data; the handshake's own deadline (5 s) passes, and the client joins its reader: with no
timeout on the socket, that join never returns.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

import pytest

from harness.tls import make_certificates
from harness.verify.endpoint import Endpoint
from harness.verify.websocket import WS_SOCKET_TIMEOUT_S, refused_with
from servers import contract


def _handshake_then_silence(
    listener: socket.socket, context: ssl.SSLContext, done: threading.Event
) -> None:
    connection, _ = listener.accept()
    with context.wrap_socket(connection, server_side=True) as tls:  # tickets sent here
        tls.settimeout(600)
        tls.recv(65536)  # the handshake request, never answered
        done.wait(600)  # longer than the test waits: only the client can end it


def test_an_unanswered_handshake_over_tls_returns(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "tls")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificates.cert_path, certificates.key_path)
    context.set_alpn_protocols(["http/1.1"])
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()
    server = threading.Thread(
        target=_handshake_then_silence, args=(listener, context, done), daemon=True
    )
    server.start()
    endpoint = Endpoint(
        f"https://127.0.0.1:{listener.getsockname()[1]}", contract.PROTOCOL_H1_TLS, certificates
    )
    raised: list[BaseException] = []

    def refuse() -> None:
        with pytest.raises(TimeoutError) as timed_out:  # no answer: the handshake's deadline
            refused_with(endpoint, subprotocols=())
        raised.append(timed_out.value)

    client = threading.Thread(target=refuse, daemon=True)
    try:
        client.start()
        client.join(5 + WS_SOCKET_TIMEOUT_S + 60)
        assert not client.is_alive(), "the unanswered handshake never returned"
        assert len(raised) == 1
    finally:
        done.set()
        server.join(5)
        listener.close()

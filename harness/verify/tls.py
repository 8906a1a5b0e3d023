"""The TLS checks of the TLS protocols (h1-tls, h2): the handshake at TLS 1.3 trusting the
run's CA with the case's ALPN, TLS 1.2 refused, and hostile input at the TLS layer: bytes
that are not a ClientHello, a handshake left half-sent, and plaintext HTTP on the TLS port.
"""

from __future__ import annotations

import contextlib
import socket
import ssl

from harness.verify.endpoint import CheckFunction, EndpointOrUrl, endpoint_of, open_connection
from harness.verify.failure import excerpt, expect
from harness.verify.severity import Outcome, judge_rule, with_deviations
from harness.verify.wire import expect_still_serving, status_of, wait_for_close
from servers import contract

# Both offered, so a server that would speak the other protocol than its case is seen.
OFFERED_ALPN = ("h2", "http/1.1")
# Bytes that are not TLS, or not a ClientHello: the server closes at once, this long at most.
NOT_A_HELLO_CLOSE_S = 5.0
NOT_A_HELLO: dict[str, bytes] = {
    "zeros": b"\x00" * 64,
    "a ServerHello record": b"\x16\x03\x03\x00\x04\x02\x00\x00\x00",
    "an alert record before any hello": b"\x15\x03\x03\x00\x02\x02\x28",
    "a record declaring 2**14+2048 bytes": b"\x16\x03\x01\x48\x01" + b"\x01" * 32,
}
# A deadline may be checked by a periodic sweep: a half-sent handshake is closed by twice
# the head deadline plus this (tests/e2e/test_slow_clients.py's allowance).
HALF_HANDSHAKE_GRACE_S = 2.0
PLAINTEXT_REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
PLAINTEXT_QUIET_S = 2.0


def check_tls_handshake(server: EndpointOrUrl) -> str:
    """The handshake completes at TLS 1.3, the certificate trusted through the run's CA,
    and ALPN (h2 and http/1.1 offered) selects the case's protocol (for h1-tls, a server
    without ALPN selecting none is HTTP/1.1 too)."""
    endpoint = endpoint_of(server)
    expect(
        endpoint.tls,
        sent="nothing",
        expected="a TLS protocol to check",
        came=f"{endpoint.protocol}, which is not one",
        remedy="check a TLS case (h1-tls, h2)",
    )
    wanted = contract.ALPN_FOR_PROTOCOL[endpoint.protocol]
    hello = f"a TLS handshake trusting the run's CA, offering ALPN {', '.join(OFFERED_ALPN)}"
    with open_connection(endpoint, alpn=OFFERED_ALPN) as sock:
        assert isinstance(sock, ssl.SSLSocket)
        version, selected, cipher = sock.version(), sock.selected_alpn_protocol(), sock.cipher()
    expect(
        version == contract.TLS_MINIMUM_VERSION,
        sent=hello,
        expected=f"{contract.TLS_MINIMUM_VERSION} negotiated",
        came=f"{version} negotiated",
    )
    # a server without ALPN selects none, and the client speaks HTTP/1.1 (RFC 7301 §3.2):
    # right for h1-tls (EventMachine's TLS), never for h2
    no_alpn_is_http1 = selected is None and wanted == "http/1.1"
    expect(
        selected == wanted or no_alpn_is_http1,
        sent=hello,
        expected=f"ALPN {wanted} selected (an {endpoint.protocol} case speaks {wanted} only)",
        came=f"ALPN selected {selected!r} of {', '.join(OFFERED_ALPN)}",
    )
    if no_alpn_is_http1:
        selected = "none (HTTP/1.1 by default)"
    cipher_name = cipher[0] if cipher else "?"
    trusted = "the system's CAs"
    if endpoint.certificates is not None:
        trusted = "the run's CA" if endpoint.certificates.ca_path else "the user's certificate"
    return f"{version}, {cipher_name}, ALPN {selected}, certificate trusted through {trusted}"


def check_tls_12_refused(server: EndpointOrUrl) -> str | Outcome:
    """A client that offers TLS 1.2 at most is refused (the contract's minimum is 1.3). One
    accepted is a deviation (a lenient protocol rule: the measured clients negotiate 1.3,
    which tls-handshake checks), not a failure; the server must still serve after."""
    endpoint = endpoint_of(server)
    context = endpoint.ssl_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    accepted: str | None = None
    reason = ""
    raw = socket.create_connection((endpoint.host, endpoint.port), timeout=5.0)
    try:
        with context.wrap_socket(raw, server_hostname=endpoint.host) as sock:
            accepted = sock.version()
    except (ssl.SSLError, ConnectionResetError) as refused:
        reason = f"{type(refused).__name__}: {refused.args[-1]}"
    finally:
        raw.close()
    deviation = judge_rule(
        "tls-1.2-refused",
        "tls-1.2-refused",
        accepted is None,
        sent="a TLS handshake offering TLS 1.2 at most",
        expected="the handshake refused (the contract's minimum is TLS 1.3)",
        came=f"a TLS 1.2-only client was accepted ({accepted})" if accepted else reason,
    )
    expect_still_serving(endpoint, "a TLS 1.2 handshake")
    if deviation is not None:
        return with_deviations("TLS 1.2 accepted; still serving", [deviation])
    return f"TLS 1.2 refused ({reason})"


def check_tls_not_a_hello(server: EndpointOrUrl) -> str | Outcome:
    """Bytes that are not a ClientHello: the connection closed at once (after a refusal at
    most: nothing served), and the server keeps serving TLS. One left open, or answered as
    a request, is a deviation (hostile input let be), not a failure."""
    endpoint = endpoint_of(server)
    deviations = []
    for what, data in NOT_A_HELLO.items():
        with socket.create_connection((endpoint.host, endpoint.port), timeout=5.0) as sock:
            sock.sendall(data)
            reply, seconds = wait_for_close(sock, NOT_A_HELLO_CLOSE_S)
        if _served(reply):
            came = f"answered as a request: {excerpt(reply)}"
        elif seconds is None:
            came = f"still open after {NOT_A_HELLO_CLOSE_S:g} s"
        else:
            came = f"closed after {seconds:.1f} s"
        deviations.append(
            judge_rule(
                "tls-not-a-hello",
                "tls-not-a-hello",
                seconds is not None and not _served(reply),
                sent=f"{what} on the TLS port",
                expected=f"the connection closed within {NOT_A_HELLO_CLOSE_S:g} s, nothing served",
                came=came,
            )
        )
        expect_still_serving(endpoint, f"{what} on the TLS port")
    closed = deviations.count(None)
    detail = f"{closed} of {len(NOT_A_HELLO)} non-ClientHello openings closed, still serving"
    return with_deviations(detail, deviations)


def _served(reply: bytes) -> bool:
    """Whether a reply to bytes that are not TLS served something (a 2xx, or the body of
    `/`): a refusal in plaintext HTTP (nginx's 400 for plain HTTP on its TLS port) is not."""
    status = status_of(reply)
    return (status is not None and 200 <= status < 300) or contract.TEXT_BODY in reply


def client_hello(endpoint: EndpointOrUrl) -> bytes:
    """The bytes of a real ClientHello to the server (made in memory, never sent)."""
    endpoint = endpoint_of(endpoint)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = endpoint.ssl_context().wrap_bio(incoming, outgoing, server_hostname=endpoint.host)
    with contextlib.suppress(ssl.SSLWantReadError):  # the server's reply is never fed in
        tls.do_handshake()
    return outgoing.read()


def check_tls_half_handshake(server: EndpointOrUrl, head_timeout_s: float) -> str | Outcome:
    """Half a ClientHello, then silence: the server closes the connection within its head
    deadline (allowing for a periodic sweep), and keeps serving. A server with no such
    deadline deviates (a slow-client rule: harness.verify.severity), it does not fail."""
    endpoint = endpoint_of(server)
    hello = client_hello(endpoint)
    close_by_s = 2 * head_timeout_s + HALF_HANDSHAKE_GRACE_S
    with socket.create_connection((endpoint.host, endpoint.port), timeout=5.0) as sock:
        sock.sendall(hello[: len(hello) // 2])
        _, seconds = wait_for_close(sock, close_by_s)
    expect_still_serving(endpoint, "a half-sent handshake")
    deviation = judge_rule(
        "tls-half-handshake",
        "tls-half-handshake",
        seconds is not None,
        sent="half a ClientHello, then silence",
        expected=f"the connection closed within {close_by_s:.1f} s (the head deadline is "
        f"{head_timeout_s:g} s)",
        came=f"still open after {close_by_s:.1f} s",
    )
    if deviation is not None:
        return Outcome("no slow-client deadline on the handshake; still serving", (deviation,))
    return f"half a ClientHello closed after {seconds:.1f} s (head deadline {head_timeout_s:g} s)"


def check_tls_plaintext(server: EndpointOrUrl) -> str | Outcome:
    """A plaintext HTTP request to the TLS port is not served (a 400 or a close, no 2xx),
    and the server keeps serving TLS. One served is a deviation (the case's clients speak
    TLS, which tls-handshake checks), not a failure."""
    endpoint = endpoint_of(server)
    with socket.create_connection((endpoint.host, endpoint.port), timeout=5.0) as sock:
        sock.sendall(PLAINTEXT_REQUEST)
        reply, seconds = wait_for_close(sock, PLAINTEXT_QUIET_S)
    status = status_of(reply)
    deviation = judge_rule(
        "tls-plaintext",
        "tls-plaintext",
        not _served(reply),
        sent="a plaintext GET / to the TLS port",
        expected="no answer served (a 400, or a close)",
        came=f"served: {excerpt(reply)}",
    )
    expect_still_serving(endpoint, "a plaintext request")
    how = f"answered {status}" if status is not None else "no HTTP reply"
    closed = "closed" if seconds is not None else f"left open {PLAINTEXT_QUIET_S:g} s"
    return with_deviations(f"plaintext GET / on the TLS port: {how}, {closed}", [deviation])


def tls_checks(head_timeout_s: float = contract.HEAD_TIMEOUT_S) -> dict[str, CheckFunction]:
    """The TLS checks, the half-sent handshake judged against `head_timeout_s` (the
    server's head deadline: the contract's, or its --client-timeout-s)."""
    return {
        "tls-handshake": check_tls_handshake,
        "tls-1.2-refused": check_tls_12_refused,
        "tls-not-a-hello": check_tls_not_a_hello,
        "tls-half-handshake": lambda server: check_tls_half_handshake(server, head_timeout_s),
        "tls-plaintext": check_tls_plaintext,
    }

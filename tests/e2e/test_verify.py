"""`harness verify` checks: they pass on our servers and fail on a server that breaks the
rules, over each protocol (the TLS and HTTP/2 checks too)."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from harness.tls import Certificates, make_certificates
from harness.verify import (
    H2_CHECKS,
    HTTP_CHECKS,
    WEBSOCKET_CHECKS,
    Check,
    CheckFailed,
    Endpoint,
    Outcome,
    checks_for,
    not_supported,
    protocol_checks,
    run_checks,
    strictly,
    tls_checks,
    verify_framework,
)
from harness.verify.h2 import CONCURRENT_STREAMS, check_h2_malformed_frames
from harness.verify.h2_attacks import ATTACKS
from harness.verify.h2wire import FRAME_PING, h2_frame
from harness.verify.tls import check_tls_half_handshake
from servers import FRAMEWORKS, Framework, contract
from tests.helpers import harness, require_framework
from tests.hypercorn_server import running_hypercorn


class StallingHandler(http.server.BaseHTTPRequestHandler):
    """Keep-alive, headers and body in two writes, no TCP_NODELAY: delayed-ACK stalls."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"not the contract's body"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stalling_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StallingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_checks_fail_on_a_server_that_breaks_the_contract(stalling_server: str) -> None:
    checks = {c.name: c for c in run_checks(stalling_server, HTTP_CHECKS)}
    assert not checks["text"].ok and "body" in checks["text"].detail
    assert not checks["not-found"].ok
    latency = checks["sequential-latency"]
    assert not latency.ok, latency.detail
    assert "TCP_NODELAY" in latency.detail


def test_verify_framework_passes_every_check() -> None:
    require_framework("aiohttp")
    result = verify_framework("aiohttp")
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.name for c in result.checks}
    assert {"text", "malformed", "ws-origin", "ws-1007", "sequential-latency", "sigterm"} <= names


def test_verify_reports_a_server_that_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server process knows no 'broken' framework: it exits before listening.
    monkeypatch.setitem(FRAMEWORKS, "broken", Framework("broken", "servers.none", (), ("x",)))
    result = verify_framework("broken")
    assert not result.ok
    assert result.error and "exited with status 2 before listening" in result.error


def test_verify_skips_a_sink_the_framework_does_not_offer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FRAMEWORKS, "bare", Framework("bare", "servers.none", (), ("x",)))
    result = verify_framework("bare", sink="file")
    assert result.skipped == "bare has no file sink"
    assert result.checks == ()


# -- over each protocol: the TLS and HTTP/2 checks against hypercorn on the contract's app,
# until our servers speak them (tests/hypercorn_server.py); and against servers that must
# fail them.
HEAD_TIMEOUT_S = 1.0  # the test server's TLS handshake deadline (--client-timeout-s)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def hypercorn_registered(monkeypatch: pytest.MonkeyPatch) -> str:
    """hypercorn's registry entry, for the checks that read a framework's entry."""
    entry = Framework(
        "hypercorn-test",
        "servers.none",
        (),
        ("asyncio",),
        protocols=contract.PROTOCOLS,
    )
    monkeypatch.setitem(FRAMEWORKS, entry.name, entry)
    return entry.name


def by_name(checks: tuple[Check, ...]) -> dict[str, Check]:
    return {check.name: check for check in checks}


@pytest.mark.parametrize("protocol", contract.TLS_PROTOCOLS)
def test_the_tls_checks_pass_on_a_tls_13_server_with_the_case_alpn(
    certificates: Certificates, protocol: str
) -> None:
    with running_hypercorn(protocol, certificates, HEAD_TIMEOUT_S) as endpoint:
        checks = by_name(run_checks(endpoint, tls_checks(HEAD_TIMEOUT_S)))
    assert set(checks) == {name for name in protocol_checks(protocol) if name.startswith("tls-")}
    assert all(check.ok for check in checks.values()), [c for c in checks.values() if not c.ok]
    alpn = contract.ALPN_FOR_PROTOCOL[protocol]
    assert "TLSv1.3, " in checks["tls-handshake"].detail
    assert (
        f"ALPN {alpn}, certificate trusted through the run's CA" in checks["tls-handshake"].detail
    )


def test_over_h1_tls_the_http_and_websocket_checks_run_over_tls(certificates: Certificates) -> None:
    names = ["text", "log", "not-found", "sequential-latency", "ws-handshake", "ws-origin"]
    checks = {name: (HTTP_CHECKS | WEBSOCKET_CHECKS)[name] for name in names}
    with running_hypercorn(contract.PROTOCOL_H1_TLS, certificates) as endpoint:
        results = by_name(run_checks(endpoint, checks))
    assert all(check.ok for check in results.values()), results
    assert "Server: hypercorn-h11" in results["text"].detail  # HTTP/1.1, as the case says


@pytest.mark.parametrize("protocol", [contract.PROTOCOL_H2, contract.PROTOCOL_H2C])
def test_the_h2_checks_pass_over_h2_and_h2c(
    certificates: Certificates, hypercorn_registered: str, protocol: str
) -> None:
    # the contenders' ASGI app serves the boards' workloads too: not-found must not ask them
    routes = (contract.ROUTE_TEXT, contract.ROUTE_COUNTER, contract.ROUTE_LOG)
    checks = checks_for(hypercorn_registered, (*routes, *contract.WORKLOAD_ROUTES), protocol)
    assert set(H2_CHECKS) <= set(checks) and "malformed" not in checks
    del checks["counter"]  # hypercorn has no hook that counts connections: open is 0
    # hypercorn drops the connection (no GOAWAY) when a request's END_STREAM comes after
    # its 405 was sent, which httpx's empty POST body may do: hypercorn's, at random
    del checks["wrong-method"]
    for key in ATTACKS:  # tests/e2e/test_h2_attacks.py
        del checks[key]
    with running_hypercorn(protocol, certificates, HEAD_TIMEOUT_S) as endpoint:
        results = by_name(run_checks(endpoint, checks))
    assert all(check.ok for check in results.values()), [c for c in results.values() if not c.ok]
    assert "Server: hypercorn-h2" in results["text"].detail  # the route checks spoke HTTP/2
    assert f"{CONCURRENT_STREAMS} concurrent GET /" in results["h2-concurrent-streams"].detail
    assert "8 bytes within our 8-byte window" in results["h2-settings"].detail
    malformed = results["h2-malformed-frames"].detail
    assert "h2-data-on-stream-0 PROTOCOL_ERROR" in malformed
    assert "h2-ping-7-bytes FRAME_SIZE_ERROR" in malformed
    assert "h2-oversized-frame FRAME_SIZE_ERROR" in malformed


def test_a_known_h2_deviation_that_passes_fails_the_check(
    monkeypatch: pytest.MonkeyPatch, hypercorn_registered: str
) -> None:
    # hypercorn answers DATA on stream 0 with GOAWAY: a deviation named for it is stale
    stale = {"h2-data-on-stream-0": "claimed, but hypercorn sends its GOAWAY"}
    monkeypatch.setitem(
        FRAMEWORKS,
        hypercorn_registered,
        dataclasses.replace(FRAMEWORKS[hypercorn_registered], deviations=stale),
    )
    with (
        running_hypercorn(contract.PROTOCOL_H2C) as endpoint,
        pytest.raises(CheckFailed) as failed,
    ):
        check_h2_malformed_frames(endpoint, hypercorn_registered)
    line = str(failed.value)
    assert "\n" not in line and line.startswith("sent a DATA frame on stream 0")
    assert "; came GOAWAY PROTOCOL_ERROR, as the rule asks; drop its declared deviation: " in line
    assert f"remove h2-data-on-stream-0 from deviations in [servers.{hypercorn_registered}]" in line


def test_a_malformed_frame_answered_otherwise_is_a_deviation_it_may_declare(
    monkeypatch: pytest.MonkeyPatch, hypercorn_registered: str
) -> None:
    """A robustness rule of HTTP/2 bent is a deviation, not a failure: a
    warning, declared once the server names the frame's key."""
    # a well-formed PING under a malformed frame's key: answered with its ACK, no GOAWAY
    monkeypatch.setattr(
        "harness.verify.h2.MALFORMED_FRAMES",
        {"h2-ping-7-bytes": h2_frame(FRAME_PING, bytes(8))},
    )
    with running_hypercorn(contract.PROTOCOL_H2C) as endpoint:
        said = check_h2_malformed_frames(endpoint, hypercorn_registered)
        assert isinstance(said, Outcome), said
        [deviation] = said.deviations
        assert deviation.warning and deviation.key == "h2-ping-7-bytes"
        assert deviation.came.startswith("no GOAWAY, the connection left open")
        assert said.detail.endswith("; deviating: h2-ping-7-bytes")
        declared = {"h2-ping-7-bytes": "claimed for the test"}
        monkeypatch.setitem(
            FRAMEWORKS,
            hypercorn_registered,
            dataclasses.replace(FRAMEWORKS[hypercorn_registered], deviations=declared),
        )
        said = check_h2_malformed_frames(endpoint, hypercorn_registered)
    assert isinstance(said, Outcome) and not said.deviations[0].warning
    assert said.detail.endswith("; declared deviations: h2-ping-7-bytes")


def test_the_tls_checks_fail_on_a_cleartext_server(certificates: Certificates) -> None:
    with running_hypercorn(contract.PROTOCOL_H1) as cleartext:
        pretending = Endpoint(
            cleartext.base_url.replace("http://", "https://"),
            contract.PROTOCOL_H1_TLS,
            certificates,
        )
        checks = by_name(run_checks(pretending, tls_checks(HEAD_TIMEOUT_S)))
    assert not checks["tls-handshake"].ok and "SSL" in checks["tls-handshake"].detail
    # plaintext served on the "TLS" port is a deviation, but no TLS served after it (nor
    # after the TLS 1.2 handshake) is a failure: a server that does not serve its case
    assert not checks["tls-plaintext"].ok, checks["tls-plaintext"].detail
    assert "SSLError" in checks["tls-plaintext"].detail
    assert not checks["tls-1.2-refused"].ok, checks["tls-1.2-refused"].detail


def test_the_tls_checks_fail_on_tls_12_and_an_alpn_of_another_protocol(
    certificates: Certificates,
) -> None:
    # hypercorn's own TLS: 1.2 allowed, ALPN h2 and http/1.1 offered on an h1-tls case
    with running_hypercorn(contract.PROTOCOL_H1_TLS, certificates, stock_tls=True) as endpoint:
        checks = by_name(run_checks(endpoint, tls_checks(HEAD_TIMEOUT_S)))
    assert not checks["tls-handshake"].ok
    assert "ALPN selected 'h2'" in checks["tls-handshake"].detail
    # TLS 1.2 accepted: a lenient protocol rule, a deviation (a warning), not a failure
    lenient = checks["tls-1.2-refused"]
    assert lenient.ok and [d.key for d in lenient.warnings] == ["tls-1.2-refused"]
    assert lenient.warnings[0].came.startswith("a TLS 1.2-only client was accepted")


def test_a_half_sent_handshake_held_past_the_deadline_is_a_deviation_strict_fails(
    certificates: Certificates,
) -> None:
    """A missing slow-client deadline is a robustness deviation: a warning, the
    server measured; --strict-verify (harness.verify.strictly) fails it in one line."""
    # the server holds a handshake 60 s; the check is told the deadline is 0.5 s
    with running_hypercorn(contract.PROTOCOL_H2, certificates, client_timeout_s=60) as endpoint:
        checks = run_checks(
            endpoint, {"tls-half-handshake": lambda s: check_tls_half_handshake(s, 0.5)}
        )
    [check] = checks
    assert check.ok and [d.came for d in check.warnings] == ["still open after 3.0 s"]
    [strict] = strictly(checks, "hypercorn")
    assert not strict.ok and "\n" not in strict.detail
    assert strict.detail.startswith("tls-half-handshake: sent half a ClientHello, then silence")
    assert "deviations = { tls-half-handshake = " in strict.detail


def test_the_h2_checks_fail_on_an_http_1_only_server(
    stalling_server: str, certificates: Certificates
) -> None:
    cleartext = Endpoint(stalling_server, contract.PROTOCOL_H2C)
    checks = by_name(run_checks(cleartext, H2_CHECKS))
    assert not any(check.ok for check in checks.values()), checks
    assert "no SETTINGS from the server" in checks["h2-settings"].detail
    assert "DOCTYPE HTML" in checks["h2-settings"].detail  # what it sent instead is named
    with running_hypercorn(contract.PROTOCOL_H1_TLS, certificates) as h1_over_tls:
        as_h2 = Endpoint(h1_over_tls.base_url, contract.PROTOCOL_H2, certificates)
        # (hypercorn answers an HTTP/2 preface whatever ALPN said: tls-handshake sees it)
        tls_handshake = tls_checks()["tls-handshake"]
        checks = by_name(run_checks(as_h2, H2_CHECKS | {"tls-handshake": tls_handshake}))
    assert not any(check.ok for check in checks.values()), checks
    assert "ALPN selected None, not h2" in checks["h2-reset-stream"].detail
    assert "ALPN selected 'http/1.1' of h2, http/1.1" in checks["tls-handshake"].detail


def test_verify_skips_a_protocol_the_framework_does_not_speak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    notes = {contract.PROTOCOL_H2: "its HTTP stack has no HTTP/2"}
    bare = Framework("bare", "servers.none", (), ("x",), protocol_notes=notes)
    monkeypatch.setitem(FRAMEWORKS, "bare", bare)
    result = verify_framework("bare", protocol=contract.PROTOCOL_H2)
    assert result.skipped == "its HTTP stack has no HTTP/2" and result.checks == ()
    assert result.to_dict()["protocol"] == contract.PROTOCOL_H2
    result = verify_framework("bare", protocol=contract.PROTOCOL_H2C)
    assert result.skipped == "bare has no h2c server here"


def test_over_h2_the_http_1_only_checks_are_not_supported() -> None:
    names = {check.name: check for check in not_supported("gevent", protocol="h2c")}
    assert names["malformed"].detail.startswith("not supported over h2c (HTTP/1.1 framing")
    assert "RFC 8441" in names["ws-handshake"].detail
    assert not set(names) & set(checks_for("gevent", protocol="h2c"))


@pytest.mark.parametrize("protocol", contract.PROTOCOLS)
def test_verify_framework_over_each_protocol(protocol: str) -> None:
    """nginx over every protocol (it speaks all four; the conformance matrix runs every
    server over its own): all checks pass, its head deadline short here."""
    require_framework("nginx")
    result = verify_framework("nginx", protocol=protocol, client_timeout_s=HEAD_TIMEOUT_S)
    assert result.skipped is None and result.protocol == protocol
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.name for c in result.checks if c.supported}
    assert set(protocol_checks(protocol)) <= names
    assert "text" in names and "sigterm" in names


def test_harness_verify_over_protocols_with_the_users_certificate(
    certificates: Certificates,
) -> None:
    require_framework("nginx")
    result = harness(
        "verify",
        "--frameworks",
        "nginx",
        "--no-backends",
        "--protocol",
        "h2c,h1-tls",
        "--tls-cert",
        str(certificates.cert_path),
        "--tls-key",
        str(certificates.key_path),
        "--json",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    verifications = {v["protocol"]: v for v in json.loads(result.stdout)}
    assert set(verifications) == {"h2c", "h1-tls"}
    assert all(v["ok"] for v in verifications.values())
    checks = {c["name"]: c for c in verifications["h1-tls"]["checks"]}
    assert "trusted through the user's certificate" in checks["tls-handshake"]["detail"]
    assert checks["tls-plaintext"]["ok"] and "h2-settings" not in checks
    h2c = {c["name"]: c for c in verifications["h2c"]["checks"]}
    assert h2c["h2-settings"]["ok"] and "tls-handshake" not in h2c


def test_harness_verify_names_an_unknown_protocol() -> None:
    result = harness("verify", "--frameworks", "nginx", "--protocol", "h1,h3")
    assert result.returncode == 1
    assert "unknown protocol h3: choose from h1, h1-tls, h2, h2c" in result.stderr

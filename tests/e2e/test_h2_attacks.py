"""verify's HTTP/2 attack checks (harness/verify/h2_attacks.py) against real servers: our
Twisted server ends every attack's connection with GOAWAY ENHANCE_YOUR_CALM (its frame
budget, servers/core/h2_budget.py) and serves a fresh client after; `harness verify`
reports every attack, with its figures, for nginx over h2. And the same question over
HTTP/1.1 on every server: requests pipelined on one connection, the answers never read."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from harness.tls import make_certificates
from harness.verify import endpoint_for, run_checks
from harness.verify.flood import Flood, ServerWatch, flood
from harness.verify.h2_attacks import (
    ATTACK_MAX_BYTES,
    ATTACK_RSS_LIMIT_BYTES,
    ATTACKS,
    attack_checks,
)
from harness.verify.wire import expect_still_serving
from servers import FRAMEWORKS, contract
from tests.helpers import harness, require_framework

ATTACK_TEST_S = 2.0  # each attack's time at most (verify's own is ATTACK_S)
# pipelining for long enough that the answers fill the connection's buffers, and the
# server, had it not stopped reading, would be seen reading on
PIPELINE_S = 6.0
PIPELINE_RCVBUF_BYTES = 4096


@pytest.fixture(scope="module")
def twisted_h2c() -> Iterator[ServerProcess]:
    require_framework("twisted")
    with start_server("twisted", protocol=contract.PROTOCOL_H2C) as server:
        yield server


@pytest.mark.parametrize("key", list(ATTACKS))
def test_twisted_ends_every_attack_with_enhance_your_calm(
    twisted_h2c: ServerProcess, key: str
) -> None:
    endpoint = endpoint_for(twisted_h2c.url, contract.PROTOCOL_H2C)
    checks = {key: attack_checks("twisted", ATTACK_TEST_S)[key]}
    (check,) = run_checks(endpoint, checks)
    assert check.ok and not check.deviations, check.detail
    figures = check.figures
    assert figures["ending"] == "goaway" and figures["goaway_code"] == 0xB, check.detail
    assert figures["served_during"] and figures["served_after"], check.detail
    assert check.detail.startswith("GOAWAY ENHANCE_YOUR_CALM, seen after writing ")


def test_harness_verify_reports_every_attack_for_nginx_over_h2(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    require_framework("nginx")
    certificates = make_certificates(tmp_path_factory.mktemp("tls"))
    result = harness(
        "verify",
        "--frameworks",
        "nginx",
        "--no-backends",
        "--protocol",
        "h2",
        "--tls-cert",
        str(certificates.cert_path),
        "--tls-key",
        str(certificates.key_path),
        "--json",
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (verification,) = json.loads(result.stdout)
    checks = {c["name"]: c for c in verification["checks"]}
    for key in ATTACKS:
        assert checks[key]["ok"], checks[key]
        figures = checks[key]["figures"]
        assert figures["served_after"] and figures["units_sent"] > 0, checks[key]
        assert figures["cpu_s"] is not None and figures["rss_growth_bytes"] is not None


# Every server serving HTTP/1.1 stops reading a connection whose answers are not read; and
# over TLS the one whose own rule does not count on the socket filling first.
PIPELINE_SERVERS = [
    *(name for name, info in FRAMEWORKS.items() if info.kind == "python"),
    "nginx",
    "node-http",
    "eventmachine",
]
PIPELINE_CASES = [
    *(pytest.param(name, contract.PROTOCOL_H1, id=name) for name in PIPELINE_SERVERS),
    pytest.param("eventmachine", contract.PROTOCOL_H1_TLS, id="eventmachine-h1-tls"),
]


@pytest.mark.parametrize(("name", "protocol"), PIPELINE_CASES)
def test_h1_pipelining_unread_is_bounded(
    name: str, protocol: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`GET /` pipelined on one connection, no answer read: once its answers fill the
    connection's buffers the server stops reading it (or closes it), so its memory stays
    bounded, and a second client is served after. (Its CPU is the requests the buffers
    held, answered: work a client reading them would get too.)"""
    require_framework(name)
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    tls = protocol in contract.TLS_PROTOCOLS
    certificates = make_certificates(tmp_path_factory.mktemp("tls")) if tls else None
    with start_server(name, protocol=protocol, certificates=certificates) as server:
        endpoint = endpoint_for(server.url, protocol, certificates)
        watch = ServerWatch(server.port)
        with socket.socket() as raw:
            # a small receive window, set before the handshake: the server's answers fill the
            # buffers in a fraction of the flood however slowly a loaded machine answers
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PIPELINE_RCVBUF_BYTES)
            raw.connect(("127.0.0.1", server.port))
            sock = (
                endpoint.ssl_context().wrap_socket(raw, server_hostname="127.0.0.1") if tls else raw
            )
            pipelined = Flood(b"", lambda i: request, reads=False)
            result = flood(sock, pipelined, PIPELINE_S, ATTACK_MAX_BYTES, lambda _: watch.sample())
        expect_still_serving(endpoint, "requests pipelined and never read")
        cpu_s, growth_bytes = watch.cpu_used_s(), watch.rss_growth_bytes()
    said = f"{result}: {cpu_s:.2f} s CPU, RSS +{growth_bytes / 2**20:.1f} MiB"
    assert watch.found and result.ending != "kept-open", said
    assert growth_bytes < ATTACK_RSS_LIMIT_BYTES, said

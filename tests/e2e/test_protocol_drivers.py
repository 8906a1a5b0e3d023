"""The drivers over TLS and HTTP/2 against a real nginx on loopback: each speaks the
case's protocol (h2load and the handshakes client say so), a fallback fails the step,
and session resumption shows in the handshakes counted.

One nginx for the module, its config written here: cleartext HTTP/1.1, cleartext HTTP/2
(h2c, prior knowledge), TLS 1.3 with ALPN h2 and http/1.1, and TLS 1.3 with http/1.1 only
(the server an h2 client would fall back on), all serving the contract's GET /. Steps
last one second or less.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from drivers import histograms as hdr
from drivers.base import Driver, DriverOutputError, DriverResult, Target, run_step
from drivers.h2load import H2loadDriver
from drivers.handshakes import HandshakesDriver
from drivers.oha import OhaDriver
from drivers.wrk import WrkDriver
from harness.tls import Certificates, temporary_certificates
from model.ramps import RampStep
from model.scenarios import get_scenario
from servers import contract
from servers.baselines.nginx import Nginx, Site, free_port, start_nginx
from tests.helpers import require_tool

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    h1: int
    h2c: int
    tls: int  # ALPN h2 and http/1.1
    tls_h1_only: int  # ALPN http/1.1 only


def site_blocks(ports: Ports, certificates: Certificates) -> str:
    text = contract.TEXT_BODY.decode()
    routes = f'location = / {{ return 200 "{text}"; }} location / {{ return 404; }}'
    tls = (
        f'ssl_certificate "{certificates.cert_path}"; '
        f'ssl_certificate_key "{certificates.key_path}"; ssl_protocols TLSv1.3;'
    )
    return f"""
    server {{ listen {HOST}:{ports.h1}; {routes} }}
    server {{ listen {HOST}:{ports.h2c} http2; {routes} }}
    server {{ listen {HOST}:{ports.tls} ssl http2; {tls} {routes} }}
    server {{ listen {HOST}:{ports.tls_h1_only} ssl; {tls} {routes} }}
"""


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    holder, made = temporary_certificates()
    with holder:
        yield made


@pytest.fixture(scope="module")
def nginx_ports(certificates: Certificates) -> Iterator[Ports]:
    require_tool("nginx")
    chosen: list[Ports] = []

    def render() -> Site:
        ports = Ports(*(free_port(HOST) for _ in range(4)))
        chosen.append(ports)
        return Site(
            site_blocks(ports, certificates), HOST, ports.h1, "/", tuple(vars(ports).values())
        )

    nginx: Nginx
    nginx, _site = start_nginx(render)
    try:
        yield chosen[-1]
    finally:
        nginx.stop(grace_s=2.0)


def target(port: int, protocol: str, certificates: Certificates) -> Target:
    return Target(
        HOST, port, get_scenario("text"), timeout_s=2.0, protocol=protocol,
        ca_path=certificates.ca_path,
    )  # fmt: skip


def one_step(
    driver: Driver, to: Target, tmp_path: Path, offered: float, unit: str = "concurrency"
) -> DriverResult:
    step = RampStep(0, offered=offered, unit=unit, duration_s=1.0)  # type: ignore[arg-type]
    return run_step(driver, step, to, None, tmp_path, "step000")


def port_for(ports: Ports, protocol: str) -> int:
    return {"h1": ports.h1, "h2c": ports.h2c, "h1-tls": ports.tls, "h2": ports.tls}[protocol]


# -- h2load ----------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["h1", "h1-tls", "h2", "h2c"])
def test_h2load_speaks_the_cases_protocol(
    protocol: str, nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    require_tool("h2load")
    to = target(port_for(nginx_ports, protocol), protocol, certificates)
    result = one_step(H2loadDriver(threads=1), to, tmp_path, 4)
    assert result.negotiated == protocol
    assert result.replies > 0 and result.errors_total == 0
    # the log holds each reply; one ending as the duration ends may be counted and not
    # logged (seen once: 18,334 logged of 18,335), at most one per connection
    logged = hdr.decode(result.histograms["latency"]).get_total_count()
    assert result.replies - 4 <= logged <= result.replies
    assert result.latency_ms["p99"] is not None


def test_h2load_multiplexes_streams_over_fewer_connections(
    nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    require_tool("h2load")
    driver = H2loadDriver(threads=1, multiplexed_connections=2)
    result = one_step(driver, target(nginx_ports.tls, "h2", certificates), tmp_path, 20)
    assert (result.figures.connections, result.figures.streams_per_connection) == (2, 10)
    assert result.replies > 0 and result.errors_total == 0
    assert 0 <= result.figures.unanswered <= 20  # at most what was in flight at the end


def test_an_h2_step_that_falls_back_to_http11_fails(
    nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    require_tool("h2load")
    to = target(nginx_ports.tls_h1_only, "h2", certificates)
    with pytest.raises(DriverOutputError, match="h2load spoke h1-tls where the case is h2"):
        one_step(H2loadDriver(threads=1), to, tmp_path, 2)


# -- wrk and oha -----------------------------------------------------------------------
def test_wrk_runs_over_tls(nginx_ports: Ports, certificates: Certificates, tmp_path: Path) -> None:
    require_tool("wrk")
    result = one_step(
        WrkDriver(threads=1), target(nginx_ports.tls, "h1-tls", certificates), tmp_path, 4
    )
    assert result.replies > 0 and result.errors_total == 0
    assert result.negotiated is None  # wrk does not say; the case's probe checked the server


@pytest.mark.parametrize("protocol", ["h1-tls", "h2", "h2c"])
def test_oha_speaks_tls_and_http2(
    protocol: str, nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    require_tool("oha")
    to = target(port_for(nginx_ports, protocol), protocol, certificates)
    result = one_step(OhaDriver(connections=4), to, tmp_path, 200, "req/s")
    assert result.errors_total == 0
    assert result.replies == pytest.approx(200, abs=20)  # 200 req/s for 1 s


def test_oha_on_h2_cannot_fall_back(
    nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    require_tool("oha")
    to = target(nginx_ports.tls_h1_only, "h2", certificates)
    result = one_step(OhaDriver(connections=2), to, tmp_path, 50, "req/s")
    assert result.replies == 0
    assert result.errors_total >= 40  # every request: the server offers no h2 (a TLS alert)


# -- handshakes ------------------------------------------------------------------------
@pytest.mark.parametrize("resumption", [False, True])
def test_handshakes_full_or_resumed(
    resumption: bool, nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    to = target(nginx_ports.tls_h1_only, "h1-tls", certificates)
    result = one_step(HandshakesDriver(resumption=resumption), to, tmp_path, 2)
    assert result.replies > 0 and result.errors_total == 0
    assert result.negotiated == "h1-tls"
    if resumption:  # nginx issues TLS 1.3 tickets: all but each client's first resume
        assert result.figures.resumed == result.figures.handshakes - 2
    else:
        assert result.figures.resumed == 0


def test_handshakes_full_then_resumed_in_one_step(
    nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    """The handshakes profile's "both": the step's figures are the full handshakes, the
    resumed half's rate beside them."""
    to = target(nginx_ports.tls_h1_only, "h1-tls", certificates)
    result = one_step(HandshakesDriver(resumption="both"), to, tmp_path, 2)
    assert result.replies > 0 and result.errors_total == 0
    assert result.figures.resumed == 0
    assert result.figures.resumed_per_s > 0
    # every connection but each client's first in the second half was resumed
    assert result.figures.resumed_run_fraction > 0.5
    assert result.figures.resumption_speedup > 0


def test_handshakes_on_a_cleartext_port_are_errors(
    nginx_ports: Ports, certificates: Certificates, tmp_path: Path
) -> None:
    result = one_step(
        HandshakesDriver(), target(nginx_ports.h1, "h1-tls", certificates), tmp_path, 1
    )
    assert result.replies == 0
    assert set(result.errors) == {"other"} and result.errors["other"] > 0

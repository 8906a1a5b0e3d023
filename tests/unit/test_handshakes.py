"""The handshakes driver's parser on reports its client wrote against nginx on loopback
(tests/data/handshakes_*.txt), and its commands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from drivers import histograms as hdr
from drivers.base import DriverOutputError, Target
from drivers.handshakes import HandshakesDriver, parse_handshakes
from model.ramps import ConcurrencyRamp, RampStep
from model.scenarios import get_scenario
from tests.helpers import DATA_DIR


def captured(name: str) -> str:
    return (DATA_DIR / name).read_text()


def test_full_handshakes_are_counted_and_none_resumed() -> None:
    result = parse_handshakes(captured("handshakes_full.txt"))
    assert result.replies == 34
    assert result.rate == pytest.approx(34 / 0.514513)
    assert result.errors_total == 0
    assert result.negotiated == "h1-tls"
    assert (result.figures.resumed, result.figures.resumed_fraction) == (0, 0.0)
    assert hdr.decode(result.histograms["latency"]).get_total_count() == 34
    assert 0 < result.figures.handshake_ms["p50"] <= result.latency_ms["p50"]  # type: ignore[operator]


def test_resumption_counts_what_the_server_resumed() -> None:
    result = parse_handshakes(captured("handshakes_resumed.txt"))  # two clients
    assert result.replies == 34
    assert result.figures.resumed == 32  # each client's first connection has no ticket
    assert result.figures.resumed_fraction == pytest.approx(32 / 34, abs=1e-4)


def test_both_halves_give_the_full_rate_and_the_resumed_one_beside_it() -> None:
    """resumption "both": the full handshakes' report, then the resumed half's."""
    text = captured("handshakes_full.txt") + captured("handshakes_resumed.txt")
    result = parse_handshakes(text)
    full, resumed = (
        parse_handshakes(captured("handshakes_full.txt")),
        parse_handshakes(captured("handshakes_resumed.txt")),
    )
    assert result.replies == full.replies and result.rate == full.rate
    assert result.figures.resumed == 0  # the step's own figures are the full handshakes
    assert result.figures.resumed_per_s == round(resumed.rate, 1)
    assert result.figures.resumed_run_fraction == pytest.approx(32 / 34, abs=1e-4)
    assert result.figures.resumption_speedup == round(resumed.rate / full.rate, 3)
    # the server's CPU over the step is spent on both halves' replies
    assert result.figures.window_replies == full.replies + resumed.replies > full.replies


@pytest.mark.parametrize(
    ("name", "errors"),
    [
        ("handshakes_refused.txt", {"connect": 877}),
        ("handshakes_cleartext_port.txt", {"other": 87}),  # no TLS on that port
        ("handshakes_status_404.txt", {"status": 27}),
    ],
)
def test_failures_are_counted_by_kind(name: str, errors: dict[str, int]) -> None:
    result = parse_handshakes(captured(name))
    assert result.replies == 0
    assert result.errors == errors


def test_a_refused_connection_has_no_protocol_and_no_histogram() -> None:
    result = parse_handshakes(captured("handshakes_refused.txt"))
    assert result.negotiated is None and result.histograms == {}
    assert result.latency_ms["p99"] is None


def test_output_without_a_report_is_refused() -> None:
    with pytest.raises(DriverOutputError, match="no report: Traceback"):
        parse_handshakes("Traceback (most recent call last):\n")


def test_another_alpn_is_refused() -> None:
    text = captured("handshakes_full.txt").replace('"alpn":["http/1.1"]', '"alpn":["h2"]')
    with pytest.raises(DriverOutputError, match=r"selected ALPN \['h2'\]"):
        parse_handshakes(text)


def test_one_process_with_a_client_per_unit_of_concurrency(tmp_path: Path) -> None:
    target = Target(
        "::1", 8443, get_scenario("text"), protocol="h1-tls", ca_path=Path("/tmp/ca.pem")
    )
    driver = HandshakesDriver.from_profile(ConcurrencyRamp(1, 2, 1), 2, {"tls_resumption": True})
    commands = driver.commands(RampStep(0, 3, "concurrency", 2.0), target, tmp_path)
    assert len(commands) == 1
    command = commands[0]
    assert command[:3] == [sys.executable, "-m", "drivers.handshakes"]
    assert command[command.index("--clients") + 1] == "3"
    assert command[-4:] == ["--ca", "/tmp/ca.pem", "--resumption", "on"]
    both = HandshakesDriver.from_profile(ConcurrencyRamp(1, 2, 1), 2, {"tls_resumption": "both"})
    [command] = both.commands(RampStep(0, 3, "concurrency", 2.0), target, tmp_path)
    assert command[-2:] == ["--resumption", "both"]


def test_only_h1_tls_is_spoken(tmp_path: Path) -> None:
    target = Target("127.0.0.1", 1, get_scenario("text"), protocol="h2")
    with pytest.raises(ValueError, match="h1-tls only, not h2"):
        HandshakesDriver().commands(RampStep(0, 1, "concurrency", 1.0), target, tmp_path)

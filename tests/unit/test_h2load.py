"""h2load's parser on output captured from real runs against nginx on loopback (tests/data/),
the step shapes it is given, and the negotiated-protocol check every step passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers import driver_class
from drivers import histograms as hdr
from drivers.base import (
    DriverOutputError,
    DriverResult,
    Target,
    check_negotiated,
    merge_results,
    no_latency,
)
from drivers.h2load import H2loadDriver, negotiated_protocol, parse_h2load, read_log
from model.ramps import ConcurrencyRamp, RampStep
from model.scenarios import get_scenario
from tests.helpers import DATA_DIR


def captured(name: str) -> str:
    return (DATA_DIR / name).read_text()


def test_h2_step_reads_its_latency_from_the_request_log() -> None:
    log = read_log(DATA_DIR / "h2load_h2_ok_log.tsv")
    result = parse_h2load(captured("h2load_h2_ok.txt"), log)
    assert result.negotiated == "h2"
    assert result.replies == 4129 == len(log)
    assert result.errors_total == 0
    # over its main duration (0.2 s), as h2load's own req/s; not `finished in 205.66ms`
    assert result.duration_s == pytest.approx(0.2)
    assert result.rate == pytest.approx(20645)
    histogram = hdr.decode(result.histograms["latency"])
    assert histogram.get_total_count() == 4129
    assert result.latency_ms["max"] == pytest.approx(5.386, rel=0.01)  # h2load says 5.39ms
    assert 0.069 <= result.latency_ms["p50"] <= result.latency_ms["p99"] <= 5.39  # type: ignore[operator]
    assert result.figures.unanswered == 8  # 2 connections × 4 streams in flight at the end
    assert result.figures.tls_version == "TLSv1.3"


@pytest.mark.parametrize(
    ("name", "replies", "main_duration_s"),
    [
        ("h2load_h2_late_client_stopped.txt", 3643, 1.0),  # nginx behind a proxy that held a client
        ("h2load_h2_node_late_clients_stopped.txt", 2390, 2.0),  # node-http over h2, 200 clients
    ],
)
def test_a_step_stopped_by_closing_late_clients_counts_its_main_duration_only(
    name: str, replies: int, main_duration_s: float
) -> None:
    """h2load runs on with clients that connected after its duration (drivers/h2load.py)
    until the watchdog closes their connections; its totals then cover the duration, but
    its status codes count the late clients' replies too (node: 2,428 2xx of 2,390 done)."""
    result = parse_h2load(captured(name))
    assert result.duration_s == main_duration_s  # not `finished in`, which adds the overrun
    assert result.replies == replies and result.errors_total == 0
    assert result.rate == pytest.approx(replies / main_duration_s)


def test_without_a_log_only_the_mean_and_max_are_known() -> None:
    result = parse_h2load(captured("h2load_h2_ok.txt"))
    assert result.latency_ms["avg"] == pytest.approx(0.280)
    assert result.latency_ms["max"] == pytest.approx(5.39)
    assert result.latency_ms["p99"] is None and result.histograms == {}


@pytest.mark.parametrize(
    ("name", "spoken"),
    [
        ("h2load_h2_ok.txt", "h2"),
        ("h2load_h2c_ok.txt", "h2c"),
        ("h2load_h1_tls_ok.txt", "h1-tls"),
        ("h2load_h2_fallback_h1.txt", "h1-tls"),  # asked for h2, the server chose http/1.1
        ("h2load_refused.txt", None),
    ],
)
def test_the_protocol_spoken_in_the_contracts_names(name: str, spoken: str | None) -> None:
    assert negotiated_protocol(captured(name)) == spoken


def test_cleartext_http11_is_h1() -> None:
    text = captured("h2load_h2c_ok.txt").replace(
        "Application protocol: h2c", "Application protocol: http/1.1"
    )
    assert negotiated_protocol(text) == "h1"


def test_non_2xx_replies_are_status_errors() -> None:
    result = parse_h2load(captured("h2load_status_4xx.txt"))
    assert result.replies == 0
    assert result.errors["status"] == 12383 == result.errors_total


def test_reset_streams_are_reset_errors() -> None:
    result = parse_h2load(captured("h2load_h2_reset.txt"))
    assert result.replies == 0
    assert result.errors == {"status": 0, "reset": 4894, "timeout": 0}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("h2load_refused.txt", "no connection was made"),
        ("h2load_h2c_unanswered.txt", "2 requests started over h2c, none answered"),
    ],
)
def test_a_step_with_no_reply_is_refused_not_a_zero(name: str, reason: str) -> None:
    with pytest.raises(DriverOutputError, match=reason):
        parse_h2load(captured(name))


def test_output_without_a_summary_is_refused() -> None:
    with pytest.raises(DriverOutputError, match="no summary: h2load: unknown option"):
        parse_h2load("h2load: unknown option -- 'q'\n")


# -- the negotiated protocol -----------------------------------------------------------
def result_speaking(protocol: str | None) -> DriverResult:
    return DriverResult(
        replies=1, duration_s=1.0, errors={}, latency_ms=no_latency(), negotiated=protocol
    )


def target(protocol: str) -> Target:
    return Target("127.0.0.1", 1, get_scenario("text"), protocol=protocol)


def test_a_fallback_is_an_error_never_a_figure() -> None:
    with pytest.raises(DriverOutputError, match="h2load spoke h1-tls where the case is h2"):
        check_negotiated("h2load", result_speaking("h1-tls"), target("h2"))


@pytest.mark.parametrize("spoken", ["h2", None])
def test_the_cases_protocol_or_silence_passes(spoken: str | None) -> None:
    check_negotiated("h2load", result_speaking(spoken), target("h2"))


def test_merged_processes_keep_the_protocol_they_agree_on() -> None:
    assert merge_results([result_speaking("h2"), result_speaking("h2")]).negotiated == "h2"
    assert merge_results([result_speaking("h2"), result_speaking("h2c")]).negotiated is None


# -- step shapes and commands ------------------------------------------------------------
def step(offered: int) -> RampStep:
    return RampStep(0, offered=offered, unit="concurrency", duration_s=2.0)


def test_concurrency_is_connections_unless_multiplexed() -> None:
    assert H2loadDriver().shape(step(50)) == (50, 1)
    assert H2loadDriver(multiplexed_connections=10).shape(step(1000)) == (10, 100)


def test_a_level_that_does_not_split_evenly_is_refused_when_the_profile_is_read() -> None:
    ramp = ConcurrencyRamp(levels=(10, 15))
    with pytest.raises(ValueError, match="concurrency 15 does not split evenly"):
        H2loadDriver.from_profile(ramp, 2, {"multiplexed_connections": 10})


def test_a_paced_driver_asks_each_client_for_its_rate(tmp_path: Path) -> None:
    """The h2-attacks rounds: --rps per client, the streams still capped by the step."""
    paced = H2loadDriver(multiplexed_connections=10, rps_per_client=48.25)
    command = paced.commands(step(40), target("h2c"), tmp_path)[0]
    assert "--rps=48.2" in command and "--clients=10" in command
    assert "--max-concurrent-streams=4" in command
    assert not any(
        a.startswith("--rps") for a in H2loadDriver().commands(step(4), target("h2c"), tmp_path)[0]
    )
    with pytest.raises(ValueError, match="rps_per_client must be positive"):
        H2loadDriver(rps_per_client=0)


def test_h2_command_uses_alpn_and_h1_commands_pin_http11(tmp_path: Path) -> None:
    driver = H2loadDriver(threads=2, multiplexed_connections=2)
    h2 = driver.commands(step(20), target("h2"), tmp_path)[0]
    assert h2[-1] == "https://127.0.0.1:1/" and "--h1" not in h2
    assert "--clients=2" in h2 and "--max-concurrent-streams=10" in h2 and "--threads=2" in h2
    assert "--duration=2000ms" in h2
    h2c = driver.commands(step(20), target("h2c"), tmp_path)[0]
    assert h2c[-1] == "http://127.0.0.1:1/" and "--h1" not in h2c
    h1_tls = H2loadDriver().commands(step(4), target("h1-tls"), tmp_path)[0]
    assert h1_tls[-1].startswith("https://") and "--h1" in h1_tls


def test_multiplexed_http11_would_pipeline_and_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"would pipeline 10 HTTP/1\.1 requests"):
        H2loadDriver(multiplexed_connections=2).commands(step(20), target("h1"), tmp_path)


def test_a_post_scenario_sends_its_body_from_a_file(tmp_path: Path) -> None:
    post = Target("127.0.0.1", 1, get_scenario("log"), protocol="h2")
    command = H2loadDriver().commands(step(1), post, tmp_path)[0]
    assert f"--data={tmp_path / 'h2load-body.bin'}" in command
    assert (tmp_path / "h2load-body.bin").read_bytes() == get_scenario("log").body
    assert "--header=content-type: application/json" in command


def test_h2load_is_registered_with_the_protocols_it_speaks() -> None:
    cls = driver_class("h2load")
    assert cls.package == "nghttp2-client"
    assert cls.protocols == ("h1", "h1-tls", "h2", "h2c")


@pytest.mark.parametrize(
    ("name", "verifies"), [("wrk", False), ("h2load", False), ("oha", True), ("handshakes", True)]
)
def test_each_tls_driver_says_whether_it_verifies_the_certificate(
    name: str, verifies: bool
) -> None:
    assert driver_class(name).ca_trusted is verifies  # type: ignore[attr-defined]


def test_random_paths_are_a_seeded_random_list_the_clients_cycle(tmp_path: Path) -> None:
    files = Target(
        "127.0.0.1", 1, get_scenario("files"), protocol="h2", paths=("/files/a", "/files/b")
    )
    command = H2loadDriver().commands(step(2), files, tmp_path)[0]
    assert command[-1] == f"--input-file={tmp_path / 'h2load-urls.txt'}"
    urls = (tmp_path / "h2load-urls.txt").read_text().split()
    assert len(urls) == 10_000 and set(urls) == {files.urls()[0], files.urls()[1]}
    H2loadDriver().commands(step(2), files, tmp_path)
    assert (tmp_path / "h2load-urls.txt").read_text().split() == urls  # the same every time

"""Driver output parsers, on output captured from the real tools in tests/data/."""

from __future__ import annotations

import csv
import json

import pytest

from drivers import histograms as hdr
from drivers.ab import parse_ab
from drivers.base import DriverOutputError, DriverResult, merge_results, no_latency
from drivers.httperf import parse_httperf, processes_needed
from drivers.oha import STORING_LINE as STORING
from drivers.oha import Request, error_kind, max_in_flight, parse_oha
from drivers.siege import parse_siege
from drivers.wrk import parse_wrk
from model.step_figures import StepFigures
from tests.helpers import DATA_DIR

DATA = DATA_DIR


def captured(name: str) -> str:
    return (DATA / name).read_text(errors="replace")


# -- wrk -------------------------------------------------------------------------------
def test_wrk_clean_run() -> None:
    result = parse_wrk(captured("wrk_ok.txt"))
    assert result.replies == 24993
    assert result.duration_s == pytest.approx(2.099721)
    assert result.rate == pytest.approx(11903.0, rel=1e-3)
    assert result.errors_total == 0
    assert result.latency_ms["p50"] == pytest.approx(0.816)
    assert result.latency_ms["p99"] == pytest.approx(1.687)
    assert result.latency_ms["max"] == pytest.approx(7.272)


def test_wrk_non_2xx_replies_are_status_errors_not_replies() -> None:
    result = parse_wrk(captured("wrk_status_errors.txt"))
    assert result.errors["status"] == 13522
    assert result.replies == 0
    assert result.errors_total == 13522


def test_wrk_refused_connection_has_no_report() -> None:
    with pytest.raises(DriverOutputError, match="no WRK_JSON report line: unable to connect"):
        parse_wrk(captured("wrk_refused.txt"))


def test_empty_output_is_refused() -> None:
    with pytest.raises(DriverOutputError, match="no output"):
        parse_wrk("")


# -- httperf ---------------------------------------------------------------------------
def test_httperf_run_with_reply_rate_samples() -> None:
    result = parse_httperf(captured("httperf_ok_samples.txt"))
    assert result.replies == 60000
    assert result.rate == pytest.approx(4986.0)  # autobench's avg reply rate
    assert result.errors_total == 0
    assert result.latency_ms["avg"] == pytest.approx(1.1)
    assert result.figures.connection_rate_per_s == pytest.approx(499.6)
    assert result.figures.max_concurrent_connections == 54


def test_httperf_short_run_without_samples_uses_replies_over_duration() -> None:
    result = parse_httperf(captured("httperf_ok_short.txt"))
    assert result.achieved is None
    assert result.rate == pytest.approx(4000 / 1.997)


@pytest.mark.parametrize(
    ("name", "kind", "count"),
    [
        ("httperf_refused.txt", "connect", 200),
        ("httperf_timeouts.txt", "timeout", 100),
        ("httperf_status_4xx.txt", "status", 1000),
    ],
)
def test_httperf_errors_by_kind(name: str, kind: str, count: int) -> None:
    result = parse_httperf(captured(name))
    assert result.errors[kind] == count
    assert result.errors_total == count
    assert result.replies == 0
    assert result.latency_ms["avg"] is None


def test_httperf_process_split_keeps_each_under_fd_setsize() -> None:
    assert processes_needed(50, 5) == 1
    assert processes_needed(600, 5) == 3
    assert processes_needed(100_000, 5) == 8


def test_httperf_truncated_output_is_refused() -> None:
    with pytest.raises(DriverOutputError, match="httperf output lacks"):
        parse_httperf(captured("httperf_ok_short.txt")[:300])


# -- ab --------------------------------------------------------------------------------
def test_ab_clean_run_with_percentiles() -> None:
    result = parse_ab(captured("ab_ok.txt"))
    assert result.replies == 5000
    assert result.duration_s == pytest.approx(0.378)
    assert result.errors_total == 0
    assert result.latency_ms == {
        **no_latency(),
        "avg": 7.0,
        "p50": 6.0,
        "p90": 12.0,
        "p99": 19.0,
        "max": 22.0,
    }


def test_ab_length_failures_are_artefacts_when_bodies_vary() -> None:
    text = captured("ab_length_failures.txt")
    varying = parse_ab(text, body_length_varies=True)
    assert varying.errors_total == 0
    assert varying.replies == 2000
    assert varying.figures.length_mismatches == 1999
    fixed = parse_ab(text, body_length_varies=False)
    assert fixed.errors["length"] == 1999
    assert fixed.replies == 1


def test_ab_non_2xx() -> None:
    result = parse_ab(captured("ab_non2xx.txt"))
    assert result.errors["status"] == 200
    assert result.replies == 0


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("ab_refused.txt", "Connection refused"),
        ("ab_timeout.txt", "The timeout specified has expired"),
    ],
)
def test_ab_aborted_runs_name_the_reason(name: str, reason: str) -> None:
    with pytest.raises(DriverOutputError, match=reason):
        parse_ab(captured(name))


# -- siege -----------------------------------------------------------------------------
def test_siege_json_report() -> None:
    result = parse_siege(captured("siege_ok.txt"))
    assert result.replies == 10776
    assert result.duration_s == pytest.approx(2.26)
    assert result.latency_ms["avg"] == pytest.approx(60.0)
    assert result.figures.megabytes_per_s == pytest.approx(0.12)


def test_siege_4xx_are_status_errors() -> None:
    result = parse_siege(captured("siege_4xx.txt"))
    assert result.errors["status"] == 7401
    assert result.replies == 0


def test_siege_refused_names_the_error_without_colour_codes() -> None:
    with pytest.raises(DriverOutputError, match=r"^siege gave no report: \[error\] socket"):
        parse_siege(captured("siege_refused.txt"))


# -- merging processes -----------------------------------------------------------------
def test_merge_adds_counts_and_weights_latency() -> None:
    errors_a = {"timeout": 1, "driver_fd_unavailable": 5}
    latency_a = {**no_latency(), "avg": 1.0, "max": 4.0}
    latency_b = {**no_latency(), "avg": 3.0, "max": 9.0}
    a = DriverResult(100, 2.0, errors_a, latency_a, figures=StepFigures(connections=10))
    b = DriverResult(300, 2.5, {"timeout": 2}, latency_b, figures=StepFigures(connections=30))
    merged = merge_results([a, b])
    assert merged.replies == 400
    assert merged.errors == {"timeout": 3, "driver_fd_unavailable": 5}
    assert merged.errors_total == 3
    assert merged.driver_errors == 5
    assert merged.latency_ms["avg"] == pytest.approx(2.5)
    assert merged.latency_ms["max"] == 9.0
    assert merged.rate == pytest.approx(100 / 2.0 + 300 / 2.5)
    assert merged.figures == StepFigures(processes=2, connections=40)


# -- oha ---------------------------------------------------------------------------------
def captured_requests(name: str) -> list[Request]:
    """A request log captured from oha's --db-url SQLite file, as CSV."""
    with (DATA / name).open(newline="") as handle:
        return [
            Request(float(row[0]), float(row[1]), float(row[2]), int(row[3]))
            for row in list(csv.reader(handle))[1:]
        ]


def test_oha_clean_step_reads_both_latencies_from_its_request_log() -> None:
    requests = captured_requests("oha_ok_requests.csv")
    result = parse_oha(
        captured("oha_ok.txt"), requests, offered_per_s=1000, duration_s=1.0, connections=20
    )
    assert result.replies == 999 and result.errors_total == 0
    assert result.rate == pytest.approx(999.0)
    assert result.figures.schedule_error == pytest.approx(-0.001)
    assert result.figures.max_in_flight <= 20
    # the histogram's percentiles agree with oha's own (from the intended send) to 3 %
    report = json.loads(STORING.sub("", captured("oha_ok.txt")))
    assert result.latency_ms["p50"] == pytest.approx(
        report["latencyPercentiles"]["p50"] * 1000, rel=0.03
    )
    assert result.latency_ms["max"] == pytest.approx(report["summary"]["slowest"] * 1000, rel=1e-3)
    corrected = hdr.decode(result.histograms["latency"])
    uncorrected = hdr.decode(result.histograms["latency_uncorrected"])
    assert corrected.get_total_count() == uncorrected.get_total_count() == 999
    assert result.latency_uncorrected_ms is not None
    for key in ("p50", "p90", "p99", "max"):  # from its due time a request never waits less
        assert result.latency_ms[key] >= result.latency_uncorrected_ms[key]  # type: ignore[operator]


def test_oha_non_2xx_replies_are_status_errors_with_their_latency() -> None:
    result = parse_oha(
        captured("oha_status.txt"),
        captured_requests("oha_status_requests.csv"),
        offered_per_s=200,
        duration_s=1.0,
        connections=20,
    )
    assert result.replies == 0
    assert result.errors == {"status": 200}
    assert result.latency_ms["p99"] is not None


def test_oha_refused_connections_are_connect_errors_and_no_histogram() -> None:
    result = parse_oha(
        captured("oha_refused.txt"), [], offered_per_s=100, duration_s=1.0, connections=20
    )
    assert result.errors == {"connect": 100}
    assert result.replies == 0 and result.histograms == {}
    assert result.latency_ms == no_latency()


def test_oha_without_a_report_is_refused() -> None:
    with pytest.raises(DriverOutputError, match="no JSON report: For more information"):
        parse_oha(captured("oha_bad_url.txt"), [], offered_per_s=1, duration_s=1.0, connections=1)


def test_oha_h2_deadline_aborts_are_its_own_not_the_servers() -> None:
    result = parse_oha(
        captured("oha_h2_deadline.txt"),
        captured_requests("oha_h2_deadline_requests.csv"),
        offered_per_s=200,
        duration_s=1.0,
        connections=4,
    )
    assert result.replies == 200 and result.errors_total == 0
    assert result.figures.aborted_at_deadline == 3


def test_oha_error_messages_map_to_the_common_kinds() -> None:
    assert error_kind("Connection refused (os error 111)") == "connect"
    assert error_kind("timeout") == "timeout"
    assert error_kind("Connection reset by peer (os error 104)") == "reset"
    assert error_kind("something new") == "other"


def test_max_in_flight_counts_overlapping_requests() -> None:
    requests = [
        Request(0.0, 0.0, 1.0, 200),
        Request(0.5, 0.5, 1.5, 200),
        Request(1.0, 1.0, 2.0, 200),
    ]
    assert max_in_flight(requests) == 2  # the third starts as the first ends

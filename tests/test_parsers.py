"""Driver output parsers, on captured output in tests/data/."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.wrk import parse_wrk

DATA = Path(__file__).parent / "data"


def test_wrk_report_of_a_clean_run() -> None:
    report = parse_wrk((DATA / "wrk_ok.txt").read_text())
    assert report.requests == 24993
    assert report.duration_s == pytest.approx(2.099721)
    assert report.requests_per_s == pytest.approx(11903.0, rel=1e-3)
    assert report.errors_total == 0
    assert report.latency_ms["p50"] == pytest.approx(0.816)
    assert report.latency_ms["p99"] == pytest.approx(1.687)
    assert report.latency_ms["max"] == pytest.approx(7.272)


def test_wrk_report_counts_non_2xx_as_status_errors() -> None:
    report = parse_wrk((DATA / "wrk_status_errors.txt").read_text())
    assert report.errors["status"] == report.requests == 13522
    assert report.errors_total == 13522


def test_wrk_refused_connection_has_no_report() -> None:
    with pytest.raises(ValueError, match="no WRK_JSON report line: unable to connect"):
        parse_wrk((DATA / "wrk_refused.txt").read_text())


def test_wrk_empty_output_is_refused() -> None:
    with pytest.raises(ValueError, match="no output"):
        parse_wrk("")

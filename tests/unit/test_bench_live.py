"""A bench told to the live state (harness.bench_live), without a network: its case labels
parse back, a round's row carries the ratio and its interval, the state and the exporter
carry the rows, and a bench's events go through the same reporter as a run's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.bench_live import BenchWatch, bench_case_label, driver_step, round_row
from harness.live.metrics import run_registry
from harness.live.reporters import LiveReporter
from harness.live.state import LiveState, parse_case_label
from harness.stats import paired_ratio_interval


@pytest.mark.parametrize(
    ("protocol", "at_most", "label"),
    [
        ("h1", True, "aiohttp minimal round 3 of at most 60"),
        ("h1-tls", False, "aiohttp h1-tls minimal round 3 of 5"),
    ],
)
def test_a_bench_case_label_parses_back(protocol: str, at_most: bool, label: str) -> None:
    rounds_max = 60 if at_most else 5
    made = bench_case_label("aiohttp", protocol, "minimal", 2, rounds_max, at_most=at_most)
    assert made == label
    parsed = parse_case_label(made)
    assert (parsed.framework, parsed.protocol, parsed.round) == ("aiohttp", protocol, 3)


def test_a_round_row_has_the_paired_ratio_and_its_interval() -> None:
    ours, minimal = [900.0, 1000.0, 950.0], [1000.0, 1100.0, 1000.0]
    row = round_row("req_per_s", ours, minimal, 10)
    interval = paired_ratio_interval(ours, minimal)
    assert interval is not None
    assert row["ratio"] == round(interval.value, 4)
    assert row["ci"] == [round(interval.low, 4), round(interval.high, 4)]
    assert (row["rounds_done"], row["rounds_max"], row["unit"]) == (3, 10, "req/s")
    assert row["ci"][0] < row["ratio"] < row["ci"][1]


def test_one_round_has_a_ratio_and_no_interval() -> None:
    row = round_row("kb_per_conn", [12.0], [8.0], 3)
    assert (row["ratio"], row["ci"]) == (1.5, None)
    unknown = round_row("cpu_us_per_conn", [None], [300.0], 3)
    assert (unknown["ratio"], unknown["ci"]) == (None, None)


def test_an_unknown_figure_is_refused() -> None:
    with pytest.raises(ValueError, match="req_per_s"):
        round_row("req_s", [1.0], [1.0], 3)


def test_a_driver_step_counts_its_errors_and_keeps_its_latency() -> None:
    step = driver_step(10, "concurrency", 9000.0, 18000, {"timeout": 2, "connect": 0}, {"p99": 4})
    assert step.errors["total"] == 2
    assert math.isclose(step.error_rate, 2 / 18002)
    assert (step.latency_ms["p99"], step.latency_ms["p50"]) == (4, None)


def bench_state() -> LiveState:
    return LiveState(
        run_id="20261207-030000.000-bench",
        profile="bench",
        frameworks=("aiohttp",),
        cases_total=4,
        step_s=None,
        round_s=3.0,
        kind="bench",
    )


def test_a_benchs_rounds_reach_the_page_and_the_metrics() -> None:
    """Two rounds of ours and minimal through the reporter: the page's state has each run
    as a case and the round's row; the exposition parses back with the app's figures."""
    state = bench_state()
    watch = BenchWatch(LiveReporter(state, None), "aiohttp", "h1", 60, at_most=True)
    measured: dict[str, list[float]] = {"ours": [], "minimal": []}
    for round_index, rates in enumerate(({"ours": 900.0, "minimal": 1000.0},) * 2):
        for app, rate in rates.items():
            watch.app_started(app, round_index, 1)
            watch.step_started(0, 10, "concurrency")
            watch.sample({"server_cpu_pct": 80.0, "server_rss_bytes": 30_000_000})
            watch.step_finished(driver_step(10, "concurrency", rate, int(rate * 3), {}, {}))
            watch.app_finished()
            measured[app].append(rate)
        watch.round_finished("req_per_s", measured["ours"], measured["minimal"])
    snapshot = state.snapshot()
    assert snapshot["kind"] == "bench"
    assert [s["case"] for s in snapshot["series"]][:2] == [
        "aiohttp ours round 1 of at most 60",
        "aiohttp minimal round 1 of at most 60",
    ]
    assert snapshot["cases_done"] == 4 and snapshot["flags"] == []
    (row,) = snapshot["bench"]
    assert (row["rounds_done"], row["ratio"]) == (2, 0.9)
    text = generate_latest(run_registry(state)).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = {"framework": "aiohttp", "protocol": "h1", "figure": "req_per_s"}
    assert (
        samples[("harness_bench_figure", tuple(sorted({**labels, "app": "ours"}.items())))] == 900
    )
    assert samples[("harness_bench_rounds", tuple(sorted(labels.items())))] == 2
    replies = {dict(k[1])["case"]: v for k, v in samples.items() if k[0] == "harness_replies_total"}
    assert replies["aiohttp minimal round 2 of at most 60"] == 3000


def test_a_run_publishes_no_bench_metrics() -> None:
    state = bench_state()
    text = generate_latest(run_registry(state)).decode()
    assert "harness_bench_" not in text


def test_a_failed_app_run_is_a_flag_and_a_bench_settles_nothing(tmp_path: Path) -> None:
    """A bench's reporter has no run.json to settle from (its run directory: None)."""
    state = bench_state()
    watch = BenchWatch(LiveReporter(state, None), "aiohttp", "h1", 3, at_most=False)
    watch.app_started("ours", 0, 1)
    watch.app_finished("aiohttp ours: wrk saw errors")
    snapshot = state.snapshot()
    assert [f["flag"] for f in snapshot["flags"]] == ["failed"]
    assert snapshot["settled"] == []


def test_a_failing_view_stops_itself_in_one_line_never_the_bench(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Figures the state cannot take (an infinite offered load) stop the live view, said once on
    stderr; the bench's later events raise nothing and change nothing."""
    state = bench_state()
    reporter = LiveReporter(state, None)
    watch = BenchWatch(reporter, "aiohttp", "h1", 3, at_most=False)
    watch.app_started("ours", 0, 1)
    watch.load_finished(math.inf, "concurrency", 9000.0, 100, {}, {})
    version = state.version
    watch.app_finished()
    watch.round_finished("req_per_s", [1.0], [1.0])
    assert reporter.broken is not None and "offered" in reporter.broken
    assert state.version == version and state.snapshot()["bench"] == []
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: the live view stopped (")

"""Bench runs as results (model.bench, harness.bench_record, harness.bench_diff): the
model round-trips and refuses what it does not know, history lists a bench beside a
compare run, a diff of two benches gives the ratio's change with its interval, the trend
and the published page carry them."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from harness.bench import bench_summary
from harness.bench_diff import diff_benches
from harness.bench_record import http_case
from harness.history import bench_limits, bench_trend_series, list_history
from harness.publish import publish
from harness.stats import log_ratio_change_interval
from model.bench import (
    BENCH_SCHEMA,
    BenchCase,
    BenchFigure,
    BenchRun,
    judge,
    read_bench_run,
    read_result,
    write_bench_run,
)
from model.results import Run, read_run, write_run
from tests.helpers import DATA_DIR, SYNTHETIC_HOST, synthetic_case, synthetic_run

MINIMAL = [10000.0, 10200.0, 9900.0, 10100.0, 9950.0]


def http_figure(ratios: list[float]) -> BenchFigure:
    """req/s of ours at `ratios` of the minimal app's, round by round, as the bench judges it."""
    ours = [m * r for m, r in zip(MINIMAL, ratios, strict=False)]
    result = bench_summary("gevent", None, ours, MINIMAL[: len(ours)], None)
    return http_case(result).figures[0]


def bench_run(run_id: str, ratios: list[float], **fields: object) -> BenchRun:
    figure = http_figure(ratios)
    case = BenchCase("gevent", None, "h1", len(ratios), (figure,), {"precision_pct": None})
    return BenchRun(
        kind="http", run_id=run_id, started="2026-12-07T02:00:00+00:00",
        finished="2026-12-07T02:01:00+00:00", host=dict(SYNTHETIC_HOST),
        versions={"python": "3.11"}, config={"rounds": len(ratios)}, cases=(case,),
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def ws_figure(name: str, ours: list[float], minimal: list[float]) -> BenchFigure:
    return BenchFigure(name, "lower", 1.25, tuple(ours), tuple(minimal), 1.1, (1.0, 1.2), "within")


def written(directory: Path, run: BenchRun) -> Path:
    directory.mkdir(parents=True)
    write_bench_run(run, directory)
    return directory


# -- the model -------------------------------------------------------------------------------
def test_a_bench_run_round_trips_through_its_file(tmp_path: Path) -> None:
    run = bench_run("20261207-020000.000-bench", [0.96, 0.97, 0.95, 0.98, 0.96])
    ws = BenchCase(
        "aiohttp", None, "h1", 2,
        (ws_figure("KB/conn", [10.0, 11.0], [9.0, 9.5]),
         ws_figure("CPU µs/conn", [300.0, 310.0], [250.0, 260.0])),
        {"connections": 600, "held_min": {"ours": 600, "minimal": 600}},
    )  # fmt: skip
    ws_run = dataclasses.replace(run, kind="ws", run_id="20261207-020100.000-bench-ws", cases=(ws,))
    for kept in (run, ws_run):
        path = write_bench_run(kept, tmp_path)
        data = json.loads(path.read_text())
        assert data["schema"] == BENCH_SCHEMA and data["kind"] == kept.kind
        assert read_bench_run(tmp_path) == kept == read_result(path)
    # each round's figures are kept, round i of ours beside round i of the minimal app
    (figure,) = run.cases[0].figures
    assert len(figure.ours) == len(figure.minimal) == 5
    assert figure.round_ratios == pytest.approx([0.96, 0.97, 0.95, 0.98, 0.96])


def test_a_captured_bench_v1_file_still_reads() -> None:
    """tests/data/bench_v1: a real `harness bench --frameworks gevent` run as /1 wrote it;
    a later schema must keep reading it (or upgrade it, as model.results does its own)."""
    run = read_bench_run(DATA_DIR / "bench_v1")
    assert (run.schema, run.kind, run.status) == (BENCH_SCHEMA, "http", "complete")
    (case,) = run.cases
    (figure,) = case.figures
    assert figure.name == "req/s" and len(figure.ours) == case.rounds == 3
    assert figure.ratio_ci is not None and figure.ratio_ci[0] <= figure.ratio <= figure.ratio_ci[1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema": "harness.bench/2"}, "bench schema 'harness.bench/2' is not readable"),
        ({"kind": "grpc"}, "bench kind 'grpc' is not one of http, ws"),
        ({"status": "failed"}, "status failed needs a status_reason"),
        ({"run_id": ""}, "run_id must not be empty"),
    ],
)
def test_a_bench_file_of_an_unknown_version_or_kind_is_refused_by_name(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    path = write_bench_run(bench_run("20261207-020000.000-bench", [0.96, 0.97]), tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        read_result(path)


def test_a_compare_reader_refuses_a_bench_by_its_schema(tmp_path: Path) -> None:
    path = write_bench_run(bench_run("20261207-020000.000-bench", [0.96, 0.97]), tmp_path)
    with pytest.raises(ValueError, match=f"schema '{BENCH_SCHEMA}' is a bench's"):
        read_run(path)
    # and read_result still reads a compare run as one
    write_run(
        synthetic_run("20261201-100000.000-quick", [synthetic_case("aiohttp", MINIMAL)]), tmp_path
    )
    assert isinstance(read_result(tmp_path), Run)


def figure_of(**fields: object) -> BenchFigure:
    """A req/s figure of no rounds, with `fields` changed."""
    base: dict[str, object] = {
        "name": "req/s", "better": "higher", "limit": 0.95, "ours": (), "minimal": (),
        "ratio": None, "ratio_ci": None, "verdict": "within",
    }  # fmt: skip
    return BenchFigure(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: figure_of(ours=(1.0,)), "in pairs"),
        (lambda: figure_of(better="up"), "better 'up'"),
        (lambda: figure_of(verdict="fine"), "verdict 'fine'"),
        (lambda: figure_of(ours=(math.nan,), minimal=(1.0,)), "not a finite number"),
        (lambda: figure_of(ratio=1.0, ratio_ci=(1.2, 1.1)), "low above high"),
        (lambda: BenchCase("gevent", None, "h1", 3, (http_figure([1.0, 1.0]),)), "2 rounds of 3"),
        (lambda: BenchCase("gevent", None, "h9", 2, (http_figure([1.0, 1.0]),)), "protocol 'h9'"),
    ],
)
def test_bench_figures_and_cases_validate(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()  # type: ignore[operator]


def test_the_verdict_asks_the_whole_interval_to_meet_the_limit() -> None:
    assert judge((0.96, 1.02), 0.95, "higher") == ("within", None)
    assert judge((0.80, 0.90), 0.95, "higher") == ("outside", None)
    word, reason = judge((0.90, 1.00), 0.95, "higher")
    assert word == "undecided" and reason and "straddles 0.95×" in reason
    assert judge((1.00, 1.20), 1.25, "lower") == ("within", None)
    assert judge((1.30, 1.50), 1.25, "lower") == ("outside", None)
    assert judge(None, 1.25, "lower")[0] == "undecided"
    # the HTTP bench: a tight 0.97× is within ≥ 0.95×, a tight 0.90× is not
    assert http_figure([0.97, 0.975, 0.965, 0.97, 0.972]).verdict == "within"
    assert http_figure([0.90, 0.905, 0.895, 0.90, 0.902]).verdict == "outside"


# -- the diff's figure -------------------------------------------------------------------------
def test_the_change_interval_is_welchs_on_the_logs() -> None:
    old = [0.95, 0.97, 0.96, 0.98]
    new = [1.05, 1.02, 1.08, 1.04, 1.06]
    change = log_ratio_change_interval(new, old)
    assert change is not None
    geometric = math.exp(sum(map(math.log, new)) / len(new) - sum(map(math.log, old)) / len(old))
    assert change.value == pytest.approx(geometric)
    expected = scipy_stats.ttest_ind(
        [math.log(v) for v in new], [math.log(v) for v in old], equal_var=False
    ).confidence_interval(0.95)
    assert (change.low, change.high) == pytest.approx(
        (math.exp(expected.low), math.exp(expected.high))
    )
    assert log_ratio_change_interval([1.0], old) is None


def test_a_diff_of_two_benches_gives_the_ratios_change_with_its_interval() -> None:
    a = bench_run("20261207-020000.000-bench", [0.90, 0.91, 0.89, 0.905, 0.90])
    b = bench_run("20261207-030000.000-bench", [0.99, 1.00, 0.98, 0.995, 0.99])
    (change,) = diff_benches(a, b).changes
    assert change.label == "gevent req/s" and change.verdict == "better"
    assert change.old == a.cases[0].figures[0].ratio and change.new == b.cases[0].figures[0].ratio
    assert change.change is not None and change.change.low > 1.0
    assert change.ratio_change == pytest.approx(change.new / change.old, rel=1e-3)
    (back,) = diff_benches(b, a).changes
    assert back.verdict == "worse"
    (same,) = diff_benches(a, a).changes
    assert same.verdict == "no significant change" and same.change is not None
    assert same.change.low <= 1.0 <= same.change.high
    # a lower-is-better figure (KB per connection) that rose got worse
    ws = []
    for run_id, k in (("20261207-020000.000-bench-ws", 1.0), ("20261207-030000.000-bench-ws", 1.3)):
        kb = ws_figure("KB/conn", [v * k for v in (10.0, 10.1, 9.9)], [10.0, 10.0, 10.0])
        case = BenchCase("aiohttp", None, "h1", 3, (kb,))
        ws.append(dataclasses.replace(a, kind="ws", run_id=run_id, cases=(case,)))
    assert diff_benches(*ws).changes[0].verdict == "worse"
    with pytest.raises(ValueError, match=r"bench http and .* a bench ws"):
        diff_benches(a, ws[1])


def test_a_bench_of_one_round_has_no_interval_to_diff() -> None:
    a = bench_run("20261207-020000.000-bench", [0.9])
    b = bench_run("20261207-030000.000-bench", [0.99])
    (change,) = diff_benches(a, b).changes
    assert change.verdict == "no rounds" and change.change is None
    assert change.ratio_change == pytest.approx(1.1)


# -- history, trend, publish -------------------------------------------------------------------
def results_with_benches(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    written(
        results / "20261207-020000.000-bench",
        bench_run("20261207-020000.000-bench", [0.90, 0.91, 0.89]),
    )
    written(
        results / "20261207-030000.000-bench",
        bench_run("20261207-030000.000-bench", [0.99, 1.0, 0.98]),
    )
    compare = results / "20261207-010000.000-quick"
    compare.mkdir()
    write_run(
        synthetic_run("20261207-010000.000-quick", [synthetic_case("aiohttp", MINIMAL)]), compare
    )
    return results


def test_history_lists_benches_beside_compare_runs(tmp_path: Path) -> None:
    entries = list_history(results_with_benches(tmp_path))
    assert [(e.kind, e.profile) for e in entries] == [
        ("bench http", "bench"), ("bench http", "bench"), ("compare", "quick"),
    ]  # fmt: skip
    assert all(e.problem is None for e in entries)
    ((label, text),) = entries[0].peak_texts()
    assert label == "gevent req/s" and text.startswith("0.99× [") and text.endswith("within")
    assert entries[0].to_dict()["ratios"][0]["limit"] == "≥ 0.95×"


def test_the_bench_trend_is_the_ratio_across_runs() -> None:
    runs = [
        bench_run("20261207-020000.000-bench", [0.90, 0.91, 0.89]),
        bench_run("20261207-030000.000-bench", [0.99, 1.0, 0.98]),
    ]
    series = bench_trend_series(runs)
    assert list(series) == ["gevent req/s"]
    assert [p.run_id for p in series["gevent req/s"]] == [r.run_id for r in runs]
    assert series["gevent req/s"][1].value == runs[1].cases[0].figures[0].ratio
    assert bench_limits(runs) == {"gevent req/s": 0.95}


def test_publish_puts_the_benches_on_a_page_of_their_own(tmp_path: Path) -> None:
    site = publish(results_with_benches(tmp_path), tmp_path / "site")
    assert site.benches == 2 and site.unreadable == 0
    index = site.index.read_text()
    assert 'href="bench.html"' in index and "2 bench runs" in index
    page = (tmp_path / "site" / "bench.html").read_text()
    for run_id in ("20261207-020000.000-bench", "20261207-030000.000-bench"):
        assert run_id in page
    assert "gevent req/s" in page and "vs the run before: 1.10× [" in page
    assert (tmp_path / "site" / "bench-http-vm-Test-CPU-2-cores.png").is_file()


# -- the tables (charts.bench_tables, harness.bench_diff): one column list, every style -----
def test_the_bench_tables_render_the_kept_cases_in_both_styles() -> None:
    from charts.bench_tables import BENCH_HTTP, BENCH_WS
    from harness.bench_diff import bench_diff_table

    run = bench_run("20261207-020000.000-bench", [0.97, 0.975, 0.965, 0.97, 0.972])
    (figure,) = run.cases[0].figures
    for style, ratio in (("compact", f"{figure.ratio:.2f}× ±"), ("bracketed", "× [0.")):
        table = BENCH_HTTP.render(run.cases, style)  # type: ignore[arg-type]
        assert "protocol" not in table.headers  # h1 only: said nowhere
        (row,) = table.text_rows()
        cells = dict(zip(table.headers, row, strict=True))
        assert cells["framework"] == "gevent" and cells["rounds"] == "5"
        assert ratio in cells["ours / minimal"] and cells["verdict"] == "≥ 0.95×"
    ws = BenchCase(
        "aiohttp", "asyncio", "h1", 2,
        (ws_figure("KB/conn", [10.0, 11.0], [9.0, 9.5]),
         ws_figure("RSS KB/conn", [8.0, 8.5], [7.0, 7.5]),
         ws_figure("CPU µs/conn", [300.0, 310.0], [250.0, 260.0])),
        {"connections": 600, "server_processes": 1},
    )  # fmt: skip
    (row,) = BENCH_WS.render([ws], "bracketed").text_rows()
    assert row[:5] == ["aiohttp", "asyncio", "600", "1", "10.5 · 9.2"]
    assert "1.10× [1.00, 1.20]" in row and "≤ 1.25×" in row
    later = bench_run("20261207-030000.000-bench", [0.99, 1.0, 0.98, 0.995, 0.99])
    result = diff_benches(run, later)
    rendered = bench_diff_table(result).render(result.changes, "bracketed")
    (row,) = rendered.text_rows()
    assert rendered.headers[3] == "change B/A [95 %]" and row[-1] == "better"
    assert row[3].startswith(f"{result.changes[0].ratio_change:.2f}× [")

"""A bench is a run: `harness bench` twice (plain and as `bench http`), then history lists
both, diff prints the ratio's change with its interval, trend draws the ratio, and
publish shows them on a page that opens whole in headless Chromium at a desktop's and a
phone's width. Tiny budgets (two rounds of 1 s, 10 connections): the figures are noisy,
so what is checked is their shape, never their size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.bench import BENCH_SCHEMA, read_bench_run
from tests.browser import assert_sound_at, check_page, chromium, unresolved_links
from tests.helpers import harness, require_framework, require_tool, require_tools

TINY = ("--frameworks", "gevent", "--rounds", "2", "--duration", "1", "--precision", "0",
        "--connections", "10")  # fmt: skip
SITE_WIDTHS = (1280, 390)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two benches of gevent: `harness bench …` and `harness bench http …`."""
    require_framework("gevent")
    require_tools("wrk")
    directory = tmp_path_factory.mktemp("benches") / "results"
    for command in (("bench",), ("bench", "http")):
        done = harness(*command, *TINY, "--results", str(directory), timeout_s=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"kept: {directory}/" in done.stdout
    return directory


def bench_dirs(results: Path) -> list[Path]:
    return sorted(p for p in results.iterdir() if p.name.endswith("-bench"))


def test_a_bench_keeps_its_rounds_ratio_and_verdict(results: Path) -> None:
    first, second = bench_dirs(results)
    run = read_bench_run(first)
    assert (run.schema, run.kind, run.status) == (BENCH_SCHEMA, "http", "complete")
    assert (
        run.host["cores"]
        and run.versions["tools"]["wrk"]
        and "gevent" in run.versions["frameworks"]
    )
    assert run.config["rounds"] == 2 and run.config["duration_s"] == 1.0
    (case,) = run.cases
    (figure,) = case.figures
    assert (case.framework, case.protocol, case.rounds, figure.name) == ("gevent", "h1", 2, "req/s")
    assert len(figure.ours) == len(figure.minimal) == 2 and all(v > 0 for v in figure.ours)
    assert figure.ratio_ci is not None and figure.ratio_ci[0] <= figure.ratio <= figure.ratio_ci[1]
    assert figure.verdict in ("within", "outside", "undecided") and figure.limit == 0.95
    assert read_bench_run(second).run_id == second.name


def test_history_lists_both_benches(results: Path) -> None:
    listed = harness("history", "--results", str(results), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [r["run"] for r in rows] == [p.name for p in reversed(bench_dirs(results))]
    assert {r["kind"] for r in rows} == {"bench http"}
    assert all(r["ratios"][0]["case"] == "gevent" for r in rows)
    table = harness("history", "--results", str(results))
    assert table.stdout.count("bench http") == 2 and "gevent req/s" in table.stdout


def test_diff_of_two_benches_prints_the_ratios_change_with_its_interval(results: Path) -> None:
    a, b = bench_dirs(results)
    # a noisy machine may call the change either way: --factor so high that no verdict
    # sets the exit status, whatever two rounds a side find
    shown = harness("diff", str(a), str(b), "--factor", "100")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "change B/A [95 %]" in shown.stdout and "gevent req/s" in shown.stdout
    done = harness("diff", str(a), str(b), "--factor", "100", "--json")
    (change,) = json.loads(done.stdout)["changes"]
    low, high = change["change_ci"]
    assert low <= change["change"] <= high
    assert change["a"]["ratio"] == read_bench_run(a).cases[0].figures[0].ratio
    assert change["verdict"] in ("better", "worse", "no significant change")
    # a bench is not diffed with a compare run's reader's options
    refused = harness("diff", str(a), str(b), "--pair", "gevent=gevent")
    assert refused.returncode == 1 and "not benches" in refused.stderr


def test_trend_draws_the_ratio_over_the_benches(results: Path, tmp_path: Path) -> None:
    png = tmp_path / "bench.png"
    done = harness("trend", "--profile", "bench", "--results", str(results), "--out", str(png))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 runs of bench" in done.stdout and png.stat().st_size > 0


def test_publish_shows_the_benches_and_the_page_opens_whole(results: Path, tmp_path: Path) -> None:
    require_tool("chromium")
    site = tmp_path / "site"
    done = harness("publish", str(site), "--results", str(results), timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 bench runs" in done.stdout
    page = site / "bench.html"
    text = page.read_text()
    assert all(p.name in text for p in bench_dirs(results)) and "vs the run before" in text
    with chromium(tmp_path / "chromium-profile") as browser:
        ids_of: dict[Path, set[str]] = {}
        for shown in (site / "index.html", page):
            for width in SITE_WIDTHS:
                found = check_page(browser, shown, width)
                assert_sound_at(found, width)
                ids_of[shown] = set(found["ids"])
                assert unresolved_links(shown, found["links"], ids_of) == [], shown
        assert "bench.html" in check_page(browser, site / "index.html", 1280)["links"]

"""The published site's diffs, without a network: a run is diffed with the latest earlier
run of its series that shares a case with it, and with none when no earlier run does."""

from __future__ import annotations

import dataclasses

from harness.history import HistoryEntry
from harness.publish import group_series, index_html, previous_sharing, trend_rows
from model.results import Run
from tests.helpers import synthetic_case, synthetic_run


def run(run_id: str, *frameworks: str, protocol: str = "h1") -> Run:
    cases = [
        dataclasses.replace(synthetic_case(name, [1000.0, 1010.0]), protocol=protocol)
        for name in frameworks
    ]
    return synthetic_run(run_id, cases, profile="smoke")


def pairs_of(runs: list[Run]) -> list[tuple[str, str]]:
    return [(a.run_id, b.run_id) for a, b in previous_sharing(runs)]


def test_a_run_is_paired_with_the_latest_earlier_run_that_shares_a_case() -> None:
    runs = [
        run("1", "aiohttp"),
        run("2", "nginx"),  # shares nothing with 1
        run("3", "aiohttp", "nginx"),  # both 1 and 2 share a case: the latest, 2
        run("4", "tornado"),  # shares nothing with any
        run("5", "aiohttp"),  # skips 4 for 3
    ]
    assert pairs_of(runs) == [("2", "3"), ("3", "5")]


def test_a_case_of_another_protocol_is_not_the_same_case() -> None:
    assert pairs_of([run("1", "nginx"), run("2", "nginx", protocol="h2")]) == []
    assert pairs_of([run("1", "nginx"), run("2", "nginx")]) == [("1", "2")]


def test_the_index_offers_a_diff_only_between_runs_that_share_a_case() -> None:
    runs = [run("20261201-1", "aiohttp"), run("20261201-2", "nginx")]
    entries = [HistoryEntry(r.run_id, r) for r in runs]
    [series] = group_series(entries)
    assert series.diffs == ()
    page = index_html(entries, [series], {}, "now")
    assert "diff with" not in page and "diffs/" not in page
    assert page.count("no earlier run shares a case") == 1  # the older run had none before
    assert "no earlier run shares a case" in trend_rows(series)[1][0][-1]


def test_the_index_names_an_older_run_it_diffs_with_and_links_the_one_before() -> None:
    runs = [run("20261201-1", "aiohttp"), run("20261201-2", "nginx"), run("20261201-3", "aiohttp")]
    entries = [HistoryEntry(r.run_id, r) for r in runs]
    [series] = group_series(entries)
    assert [(d.old_id, d.new_id) for d in series.diffs] == [("20261201-1", "20261201-3")]
    page = index_html(entries, [series], {}, "now")
    assert 'href="diffs/20261201-1__20261201-3.html">diff with 20261201-1<' in page
    adjacent = group_series([HistoryEntry(r.run_id, r) for r in (runs[0], runs[2])])
    page = index_html(entries, adjacent, {}, "now")
    assert ">diff with the run before<" in page

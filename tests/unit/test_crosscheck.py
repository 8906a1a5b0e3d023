"""`harness crosscheck`'s pure parts: the published ratios' file, the verdicts, the table
(one spec: the console, the Markdown and the HTML page have the same headers), and the
kept file (harness.crosscheck/1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from charts.crosscheck import CROSSCHECK_TABLE, crosscheck_html
from harness.crosscheck import (
    AGREES,
    DISAGREES,
    INCONCLUSIVE,
    NOT_MEASURED,
    Published,
    crosscheck,
    judge,
    load_published,
    measurements,
    require_pairs,
)
from harness.crosscheck.report import console_table, keep, markdown, redraw
from harness.stats import Interval
from model.crosscheck import CROSSCHECK_SCHEMA, CrosscheckRun, read_crosscheck
from model.errors import UserError
from servers import FRAMEWORKS
from servers.plugins import load_plugins


def test_the_shipped_file_holds_the_issues_pairs_on_servers_we_have() -> None:
    load_plugins()
    published = load_published()
    figures = {(p.test, p.label): p.published for p in published.pairs}
    assert figures == {
        ("plaintext", "granian / uvicorn-starlette"): 1.32,
        ("json", "granian / uvicorn-starlette"): 1.13,
        ("ASGI get 10KB, c128", "granian / uvicorn-starlette"): 2.46,
        ("ASGI get 10KB, c128", "uvicorn-starlette / hypercorn"): 5.48,
        ("baseline", "aiohttp / uvicorn-starlette"): 0.81,
        ("pipelined", "aiohttp / uvicorn-starlette"): 1.34,
    }
    for pair in published.pairs:
        assert pair.numerator in FRAMEWORKS and pair.denominator in FRAMEWORKS
        assert pair.url.startswith("https://") and pair.differs
    assert 0 < published.band < 1
    # one comparison per scenario and concurrency, each server once
    assert measurements(published.pairs)[("body-10k", 128)] == [
        "granian",
        "uvicorn-starlette",
        "hypercorn",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 2\nband = 0.3\n", "version 2 is not 1"),
        ("version = 1\nband = 0\n", "band must be a positive fraction"),
        ("version = 1\nband = 0.3\n[[pair]]\nboard = 'x'\ncolour = 'red'\n", "colour"),
    ],
)
def test_a_bad_file_is_refused_by_name(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "published.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_published(path)


def test_the_verdict_widens_our_interval_by_the_band() -> None:
    pair = load_published().pairs[0]  # published 1.32
    assert judge(pair, Interval(1.2, 1.1, 1.3), 0.35).verdict == AGREES
    assert judge(pair, Interval(1.0, 0.95, 1.05), 0.35).verdict == AGREES  # 1.05 × 1.35
    below = judge(pair, Interval(0.8, 0.75, 0.85), 0.35)
    assert below.verdict == DISAGREES and "above" in below.why
    assert judge(pair, None, 0.35, "granian: not installed here").verdict == NOT_MEASURED
    # as wide as this host's busy 3 rounds of 3 s gave (granian / uvicorn, plaintext)
    wide = judge(pair, Interval(1.70, 1.22, 2.38), 0.35)
    assert wide.verdict == INCONCLUSIVE and "wider than the band" in wide.why


def test_a_comparison_that_could_not_run_marks_its_pairs_not_measured() -> None:
    published = require_pairs(load_published(), "body-10k")
    assert len(published.pairs) == 2
    results = crosscheck(published, lambda scenario, c, servers: "not installed here: granian")
    assert [r.verdict for r in results] == [NOT_MEASURED, NOT_MEASURED]
    run = CrosscheckRun("2026-12-07T03:00:00+00:00", published.band, "", tuple(results))
    [row, _] = CROSSCHECK_TABLE.render(run.results, "compact").text_rows()
    assert row[:4] == ["granian / uvicorn-starlette", "–", "2.46", NOT_MEASURED]
    assert row[-1].endswith("vs.md")  # the terminal gets the whole URL
    page = markdown(run)
    assert page.count("\n| granian / uvicorn-starlette |") == 1
    assert "not installed here: granian" in page and "[granian: vs.md](https://" in page


def test_only_names_a_pair_or_says_which_exist() -> None:
    assert len(require_pairs(load_published(), "hypercorn").pairs) == 1
    with pytest.raises(UserError, match="tests: "):
        require_pairs(load_published(), "fortunes")
    assert isinstance(require_pairs(load_published(), None), Published)


def _judged() -> CrosscheckRun:
    """Every shipped pair judged: agreeing, disagreeing and not measured ones."""
    published = load_published()
    results = [
        judge(pair, Interval(1.2, 1.1, 1.3), published.band, run_id="20261207-031000.000-boards")
        if index % 2
        else judge(pair, None, published.band, "not installed here: nginx")
        for index, pair in enumerate(published.pairs)
    ]
    return CrosscheckRun("2026-12-07T03:10:00+00:00", published.band, "3 rounds.", tuple(results))


def test_one_spec_gives_the_console_the_markdown_and_the_page_the_same_headers() -> None:
    run = _judged()
    headers = list(CROSSCHECK_TABLE.render(run.results, "bracketed").headers)
    assert headers[:4] == ["pair", "ours [95 % CI]", "published", "verdict"]
    assert "comparison" in headers  # shown: some pairs came from a comparison run
    console = [str(column.header) for column in console_table(run).columns]
    page_headers = re.findall(r"<th>([^<]*)</th>", crosscheck_html(run))
    markdown_headers = markdown(run).split("\n| ")[1].split("\n")[0].strip(" |").split(" | ")
    assert console == headers and page_headers == headers and markdown_headers == headers


def test_the_page_links_each_source_and_each_comparisons_report() -> None:
    run = _judged()
    page = crosscheck_html(run)
    for result in run.results:
        assert f'href="{result.pair.url}"' in page
    assert page.count('href="20261207-031000.000-boards/report.html"') == 1 + sum(
        bool(r.run_id) for r in run.results
    )  # each row's link, and the comparison listed once beneath


def test_a_kept_crosscheck_reads_back_and_redraws(tmp_path: Path) -> None:
    run = _judged()
    pages = keep(run, tmp_path, "20261207-031000")
    assert pages.json.name == "crosscheck-20261207-031000.json"
    assert read_crosscheck(pages.json) == run
    pages.html.unlink()
    again, redrawn = redraw(tmp_path)  # a results directory: its newest crosscheck
    assert again == run and redrawn.html.is_file()
    data = json.loads(pages.json.read_text())
    assert data["schema"] == CROSSCHECK_SCHEMA
    data["schema"] = "harness.crosscheck/9"
    pages.json.write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"harness\.crosscheck/9"):
        redraw(pages.json)


def test_a_captured_crosscheck_v1_file_still_reads() -> None:
    """tests/data/crosscheck_v1.json: a real `harness crosscheck --only json` as /1 wrote
    it; a later format must still read it (or upgrade it)."""
    run = read_crosscheck(Path(__file__).parent.parent / "data" / "crosscheck_v1.json")
    [result] = run.results
    assert result.pair.label == "granian / uvicorn-starlette" and result.pair.published == 1.13
    assert result.ours is not None and result.ours.low < result.ours.value < result.ours.high
    assert result.run_id.endswith("-boards") and result.verdict == INCONCLUSIVE

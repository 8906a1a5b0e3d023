"""`harness crosscheck`'s pure parts: the published ratios' file, the verdicts, the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.crosscheck import (
    AGREES,
    DISAGREES,
    INCONCLUSIVE,
    NOT_MEASURED,
    Published,
    crosscheck,
    judge,
    load_published,
    markdown,
    measurements,
    require_pairs,
    rows,
)
from harness.stats import Interval
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
    assert below.verdict == DISAGREES and "above" in below.why and pair.differs in below.why
    assert judge(pair, None, 0.35, "granian: not installed here").verdict == NOT_MEASURED
    # as wide as this host's busy 3 rounds of 3 s gave (granian / uvicorn, plaintext)
    wide = judge(pair, Interval(1.70, 1.22, 2.38), 0.35)
    assert wide.verdict == INCONCLUSIVE and "wider than the band" in wide.why


def test_a_comparison_that_could_not_run_marks_its_pairs_not_measured() -> None:
    published = require_pairs(load_published(), "body-10k")
    assert len(published.pairs) == 2
    results = crosscheck(published, lambda scenario, c, servers: "not installed here: granian")
    assert [r.verdict for r in results] == [NOT_MEASURED, NOT_MEASURED]
    table = rows(results)
    assert table[0][3] == "–" and table[0][4] == "2.46" and table[0][6].endswith("vs.md")
    page = markdown(results, published.band)
    assert page.count("\n| granian / uvicorn-starlette |") == 1
    assert "not installed here: granian" in page


def test_only_names_a_pair_or_says_which_exist() -> None:
    assert len(require_pairs(load_published(), "hypercorn").pairs) == 1
    with pytest.raises(UserError, match="tests: "):
        require_pairs(load_published(), "fortunes")
    assert isinstance(require_pairs(load_published(), None), Published)

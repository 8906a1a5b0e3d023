"""`harness crosscheck` end to end on one published pair (TechEmpower's JSON, granian /
uvicorn-starlette), short: the comparison runs, the pair gets our ratio with its interval,
the published figure, its source and a verdict; the crosscheck is kept as JSON beside the
comparison and drawn as Markdown and HTML, the page naming every pair and linking the
comparison's report."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.crosscheck import read_crosscheck
from servers import FRAMEWORKS
from servers.plugins import load_plugins
from tests.helpers import harness, require_tools


def test_crosscheck_judges_a_published_pair(tmp_path: Path) -> None:
    require_tools("wrk")
    load_plugins()
    for name in ("granian", "uvicorn-starlette"):
        if name not in FRAMEWORKS or not FRAMEWORKS[name].available():
            pytest.skip(f"{name} is not installed")
    result = harness(
        "crosscheck",
        "--only",
        "json",
        "--rounds",
        "2",
        "--round-duration",
        "1",
        "--step-duration",
        "1",
        "--warmup",
        "0",
        "--results",
        str(tmp_path),
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [page] = tmp_path.glob("crosscheck-*.md")
    [row] = [line for line in page.read_text().splitlines() if "granian / uvicorn" in line]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "1.13" and cells[4] == "json (ours: json, c64)"
    assert cells[1] != "–", row  # our ratio and its interval were measured
    assert cells[3].strip("*") in ("agrees", "disagrees", "inconclusive"), row
    assert "(https://github.com/emmett-framework/granian/" in cells[8]
    [comparison] = [p for p in tmp_path.iterdir() if p.is_dir()]  # one comparison ran
    assert cells[9] == f"[{comparison.name}]({comparison.name}/report.html)"
    [kept] = tmp_path.glob("crosscheck-*.json")
    back = f'href="../{kept.with_suffix(".html").name}"'
    assert back in (comparison / "report.html").read_text()  # and back to the crosscheck
    run = read_crosscheck(kept)
    html = kept.with_suffix(".html").read_text()
    for result in run.results:  # the page names every pair, its source and its run
        assert result.pair.label in html and result.pair.url in html
        assert f'href="{result.run_id}/report.html"' in html

"""`harness crosscheck` end to end on one published pair (TechEmpower's JSON, granian /
uvicorn-starlette), short: the comparison runs, the pair gets our ratio with its interval,
the published figure, its source and a verdict, and the Markdown page is written."""

from __future__ import annotations

from pathlib import Path

import pytest

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
        "--out",
        str(tmp_path),
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [page] = tmp_path.glob("crosscheck-*.md")
    [row] = [line for line in page.read_text().splitlines() if "granian / uvicorn" in line]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[2] == "json (ours: json, c64)" and cells[4] == "1.13"
    assert cells[3] != "–", row  # our ratio and its interval were measured
    assert cells[5].split(":")[0] in ("agrees", "disagrees", "inconclusive"), row
    assert cells[6].startswith("https://github.com/emmett-framework/granian/")
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 1  # one comparison ran

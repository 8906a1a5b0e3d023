"""report.html opened in a real browser: headless Chromium, driven over
the DevTools protocol (tests/browser.py), loads the report of a real run and says whether
every figure loaded, whether anything sticks out of the page sideways — at a desktop's,
a narrow laptop's and a phone's width — and what went to its console. Without Chromium
the tests skip.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from charts.render import render
from tests.browser import WIDTHS, assert_sound_at, check_page, chromium
from tests.helpers import (
    DATA_DIR,
    SHORT_SMOKE,
    harness,
    require_framework,
    require_tool,
    require_tools,
)


def assert_page_is_sound(report: Path, figures: int, profile_dir: Path) -> dict[str, Any]:
    """At each width of WIDTHS: every figure loaded, nothing wider than the window, no
    console errors; what the page said at the last width."""
    with chromium(profile_dir) as browser:
        for width in WIDTHS:
            found = check_page(browser, report, width)
            assert found["images"] == figures, found
            assert_sound_at(found, width)
    return found


def test_a_real_runs_report_opens_whole_in_chromium(tmp_path: Path) -> None:
    """aiohttp and nginx, smoke profile (1 s steps), two rounds of 1 s each: a report with
    a verdict and intervals, written by `harness compare` itself."""
    require_tool("chromium")
    require_framework("aiohttp")
    require_framework("nginx")
    require_tools("wrk")
    result = harness(
        "compare", "--frameworks", "aiohttp,nginx", "--profile", "smoke", *SHORT_SMOKE,
        "--set", "rounds=2", "--set", "round_duration_s=1", "--out", str(tmp_path / "results"),
        timeout_s=170,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = (tmp_path / "results").iterdir()
    report = run_dir / "report.html"
    figures = len(list((run_dir / "charts").glob("*.png")))
    assert figures >= 6
    found = assert_page_is_sound(report, figures, tmp_path / "chromium-profile")
    # the verdict is on the page, in words, with an interval ("nginx > aiohttp (… [a, b])")
    assert found["verdict"] and "aiohttp" in found["verdict"] and "nginx" in found["verdict"]
    assert "[" in found["verdict"], found["verdict"]


def test_an_older_runs_report_opens_whole_in_chromium(tmp_path: Path) -> None:
    """A harness.run/3 result (no rounds, no verdict), redrawn: the page still holds."""
    require_tool("chromium")
    run_dir = tmp_path / "run_v3"
    shutil.copytree(DATA_DIR / "run_v3", run_dir)
    report = render([run_dir])
    figures = len(list((run_dir / "charts").glob("*.png")))
    found = assert_page_is_sound(report, figures, tmp_path / "chromium-profile")
    assert found["verdict"] is None


BROKEN_PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<img alt="missing" src="missing.png">
<div style="width: 3000px">too wide</div>
<script>console.error("drawn wrong"); undefined_function();</script>
</body></html>"""


def test_the_check_sees_a_broken_page(tmp_path: Path) -> None:
    """What the checks above rely on: a missing image, a 3,000 px block, console.error
    and an uncaught exception are all seen."""
    require_tool("chromium")
    page = tmp_path / "broken.html"
    page.write_text(BROKEN_PAGE)
    with chromium(tmp_path / "chromium-profile") as browser:
        found = check_page(browser, page, 800)
    assert found["broken"] == ["missing"]
    assert found["scroll_width"] > 2900 and found["overflowing"][0].startswith("div")
    errors = "\n".join(found["console_errors"])
    assert "drawn wrong" in errors and "undefined_function" in errors
    assert "missing.png" in errors  # the failed load, from the browser's own log

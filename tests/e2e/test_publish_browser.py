"""`harness publish` opened as a person would: three real runs of
two profiles (and an older run, and a directory that is no run) published into a site,
and every page reached from the index opened in headless Chromium (tests/browser.py) at a
desktop's and a phone's width — every link resolves on disk (relative, its #fragment
there), every image loads, nothing sticks out sideways, nothing goes to the console."""

from __future__ import annotations

import shutil
import socket
from collections import deque
from pathlib import Path

import pytest

from tests.browser import assert_sound_at, check_page, chromium, unresolved_links
from tests.helpers import DATA_DIR, harness, require_framework, require_tool, require_tools

SITE_WIDTHS = (1280, 390)  # a desktop window and a phone
OLDER_RUN = "20261201-041442.429-smoke"  # tests/data/run_v3: harness.run/3, another machine
SHORT = ("--set", "ramp.duration_s=1", "--set", "rounds=2", "--set", "round_duration_s=1",
         "--set", "warmup_s=0", "--set", "cooldown_s=0", "--precision", "0")  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two smoke runs and one quick run of aiohttp and nginx (short steps, two rounds
    each), the harness.run/3 run of tests/data, and a directory holding no run.json."""
    require_tool("chromium")
    require_framework("aiohttp")
    require_framework("nginx")
    require_tools("wrk")
    directory = tmp_path_factory.mktemp("publish") / "results"
    # the smoke runs without the verify pass, the quick run with it: its report's section
    for profile, verify in (("smoke", "--no-verify"), ("smoke", "--no-verify"), ("quick", None)):
        done = harness(
            "compare", "--frameworks", "aiohttp,nginx", "--profile", profile, *SHORT,
            *filter(None, [verify]), "--out", str(directory), timeout_s=150,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    shutil.copytree(DATA_DIR / "run_v3", directory / OLDER_RUN)
    # measured on another machine: named so whatever this machine is called (`vm` too)
    older = directory / OLDER_RUN / "run.json"
    other_host = f"not-{socket.gethostname()}"
    older.write_text(older.read_text().replace('"hostname": "vm"', f'"hostname": "{other_host}"'))
    (directory / "20261201-000000.000-broken").mkdir()
    return directory


def crawl(index: Path) -> list[Path]:
    """Every page reachable from `index` by its links (HTML only), in the order reached."""
    seen = [index.resolve()]
    queue = deque(seen)
    while queue:
        page = queue.popleft()
        text = page.read_text()
        for href in (part.split('"', 1)[0] for part in text.split('href="')[1:]):
            target = (page.parent / href.split("#", 1)[0]).resolve()
            if target.suffix == ".html" and target.is_file() and target not in seen:
                seen.append(target)
                queue.append(target)
    return seen


# three real runs to publish (~100 s): in the slow run; a report page, which every
# published page is drawn like, opens in Chromium in the default run (test_report_browser)
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_published_site_opens_whole_in_chromium(results: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = harness("publish", str(site), "--results", str(results), timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr
    # the older run was measured on another machine: a series of its own
    assert "4 runs (4 drawn, 0 up to date), 2 profile pages, 1 diff" in done.stdout
    assert "1 unreadable directory listed" in done.stdout

    pages = crawl(site / "index.html")
    every_page = sorted(p.resolve() for p in site.rglob("*.html"))
    assert sorted(pages) == every_page  # nothing published that the index does not reach
    assert len(every_page) == 1 + 4 + 2 + 1  # index, reports, profiles, diffs

    index = (site / "index.html").read_text()
    smoke = index[index.index(">smoke on ") :]
    made = [p.name for p in results.iterdir() if p.name.endswith("-smoke")]
    run_ids = sorted(set(made) - {OLDER_RUN})
    positions = [smoke.index(run_id) for run_id in run_ids]
    assert positions == sorted(positions, reverse=True)  # newest first
    assert "no run.json" in index and "[" in smoke  # the unreadable one, and intervals

    ids_of: dict[Path, set[str]] = {}
    with chromium(tmp_path / "chromium-profile") as browser:
        for page in pages:
            for width in SITE_WIDTHS:
                found = check_page(browser, page, width)
                assert_sound_at(found, width)
                ids_of[page] = set(found["ids"])
                assert unresolved_links(page, found["links"], ids_of) == [], page
                if page.parent.name == "profiles":
                    assert found["images"] == len(found["ids"]), found  # a chart per host
                if page.name == "report.html":
                    assert found["images"] >= 6 and "../../index.html" in found["links"]

    again = harness("publish", str(site), "--results", str(results), timeout_s=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "4 runs (0 drawn, 4 up to date)" in again.stdout


def test_publish_refuses_a_site_inside_the_results(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    done = harness("publish", str(tmp_path / "results" / "site"), "--results",
                   str(tmp_path / "results"))  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "give an OUT_DIR outside the results" in done.stderr


def test_the_link_check_sees_broken_links(tmp_path: Path) -> None:
    """What the site check relies on: an absolute URL, a missing file and a missing
    #fragment are each reported; a good relative link and its fragment are not."""
    (tmp_path / "a.html").write_text('<h2 id="here">x</h2>')
    page = tmp_path / "index.html"
    links = ["a.html#here", "a.html#gone", "missing.html", "/etc/passwd", "https://x.org/"]
    bad = unresolved_links(page, links, {})
    assert [b.split(": ")[0] for b in bad] == links[1:]

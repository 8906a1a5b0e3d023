"""`--live` and `--prometheus` on `harness bench http`: the metrics scraped twice during a
tiny bench of aiohttp grow and name the framework and the app (ours, minimal), the
ratio's rows come as rounds end; /state.json read twice shows the bench moving; the page
in headless Chromium shows the rounds' table. Tiny budgets (rounds of 2 s, 10 connections):
the figures are noisy, so what is checked is their shape, never their size."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.tools import tool_path
from tests.browser import Browser, chromium
from tests.e2e.test_live import LiveRun, Tab, counted, scrape
from tests.helpers import require_framework, require_tools

TINY = ("--frameworks", "aiohttp", "--duration", "2", "--precision", "0",
        "--connections", "10")  # fmt: skip
WAIT_S = 90.0
# a WebSocket bench's round: each app started afresh, idle 2 s, five steps opened and held,
# closed; on a loaded two-core machine past a minute and a half
WS_ROUND_WAIT_S = 240.0


@contextlib.contextmanager
def live_bench(tmp_path: Path, rounds: int, *args: str) -> Iterator[LiveRun]:
    """`harness bench http TINY --rounds ROUNDS ARGS` in the background; stopped if still
    running."""
    require_framework("aiohttp")
    require_tools("wrk")
    executable = shutil.which("harness")
    assert executable, "the harness console script is not installed"
    output = tmp_path / "harness.out"
    results = tmp_path / "results"
    with output.open("w") as sink:
        command = [executable, "bench", "http", *TINY, "--rounds", str(rounds), *args]
        command += ["--results", str(results)]
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
        )
    try:
        yield LiveRun(process, output, results)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def wait_for(
    run: LiveRun, look: Callable[[], Any], ready: Callable[[Any], bool], timeout_s: float = WAIT_S
) -> Any:
    """`look()` once `ready` holds of it (the bench still running)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = look()
        if ready(seen):
            return seen
        assert time.monotonic() < deadline and run.process.poll() is None, (seen, run.text())
        time.sleep(0.3)


def scrape_soon(url: str) -> dict[Any, float]:
    """A scrape; nothing while the bench plans (the exporter answers 404 until the run's
    state is made)."""
    try:
        return scrape(url)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise
        return {}


def replies(samples: dict[Any, float]) -> float:
    return sum(counted(samples, "harness_replies_total").values())


def test_prometheus_scrapes_of_a_bench_grow_and_name_the_framework(tmp_path: Path) -> None:
    """Two scrapes: the replies counter grew between them, its labels name aiohttp and the
    app; once a round ended, its ratio is published with the rounds done and planned."""
    with live_bench(tmp_path, 3, "--prometheus", "0") as run:
        url = run.url("prometheus metrics:")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        first = wait_for(run, lambda: scrape_soon(url), lambda s: replies(s) > 0)
        second = wait_for(
            run,
            lambda: scrape_soon(url),
            lambda s: replies(s) > replies(first) and counted(s, "harness_bench_ratio"),
        )
        assert run.wait() == 0, run.text()
    for _, labels in counted(second, "harness_replies_total"):
        found = dict(labels)
        assert found["framework"] == "aiohttp" and found["protocol"] == "h1", found
        assert found["case"].split()[1] in ("ours", "minimal"), found
    of_bench = {"framework": "aiohttp", "protocol": "h1", "figure": "req_per_s"}
    key = tuple(sorted(of_bench.items()))
    assert second[("harness_bench_rounds_max", key)] == 3
    assert second[("harness_bench_rounds", key)] >= 1
    estimate = tuple(sorted({**of_bench, "bound": "estimate"}.items()))
    assert second[("harness_bench_ratio", estimate)] > 0
    apps = {dict(labels)["app"] for _, labels in counted(second, "harness_bench_figure")}
    assert apps == {"ours", "minimal"}


@pytest.mark.timeout(300)  # a WebSocket bench of ours and the minimal app, round by round
def test_a_websocket_benchs_metrics_hold_connections_and_a_ratio(tmp_path: Path) -> None:
    """`bench ws --prometheus`: a scrape sees the app's open connections while a ramp
    holds them, a later one the rounds' KB and CPU per connection with their ratio."""
    require_framework("aiohttp")
    executable = shutil.which("harness")
    assert executable, "the harness console script is not installed"
    output = tmp_path / "harness.out"
    with output.open("w") as sink:
        command = [executable, "bench", "ws", "--frameworks", "aiohttp", "--connections", "100",
                   "--rounds", "2", "--hold", "1", "--results", str(tmp_path / "results"),
                   "--prometheus", "0"]  # fmt: skip
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
        )
    run = LiveRun(process, output, tmp_path / "results")
    try:
        url = run.url("prometheus metrics:")

        def holding(samples: dict[Any, float]) -> bool:
            return any(v > 0 for v in counted(samples, "harness_open_connections").values())

        held = wait_for(run, lambda: scrape_soon(url), holding)
        ratios = wait_for(
            run,
            lambda: scrape_soon(url),
            lambda s: (
                {dict(k[1])["figure"] for k in counted(s, "harness_bench_ratio")}
                >= {"kb_per_conn", "cpu_us_per_conn", "conns_held"}
            ),
            WS_ROUND_WAIT_S,
        )
        assert run.wait() == 0, run.text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    ((_, labels),) = [k for k, v in counted(held, "harness_open_connections").items() if v > 0]
    assert dict(labels)["framework"] == "aiohttp" and " round 1 of 2" in dict(labels)["case"]
    conns = {"framework": "aiohttp", "protocol": "h1", "figure": "conns_held"}
    for app in ("ours", "minimal"):
        assert ratios[("harness_bench_figure", tuple(sorted({**conns, "app": app}.items())))] == 100


def state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}state.json", timeout=10) as reply:
        return json.loads(reply.read())


def test_the_live_state_of_a_bench_moves_round_by_round(tmp_path: Path) -> None:
    """/state.json twice: a bench's run of ours or minimal, then a later one with the round's
    row (each app's req/s, the ratio); the page at 1280 px shows the rounds' table (a
    screenshot goes to LIVE_SCREENSHOTS when it is set, and Chromium is there)."""
    with contextlib.ExitStack() as stack:
        # the browser started first (its start is slow), the page opened during the bench
        browser = stack.enter_context(chromium(tmp_path / "chrome")) if has_chromium() else None
        run = stack.enter_context(live_bench(tmp_path, 5, "--live", "0"))
        url = run.url("live page:")
        assert url.startswith("http://127.0.0.1:") and run.text().startswith("live page:")
        first = wait_for(run, lambda: state(url), lambda s: s.get("current") is not None)
        assert first["kind"] == "bench" and first["frameworks"] == ["aiohttp"]
        assert first["current"]["framework"] == "aiohttp"
        assert first["current"]["case"].split()[1] in ("ours", "minimal")
        second = wait_for(
            run, lambda: state(url), lambda s: s.get("bench") and s.get("current") is not None
        )
        assert second["version"] > first["version"]
        assert second["current"]["case"] != first["current"]["case"]
        (row,) = second["bench"]
        assert (row["framework"], row["figure"], row["rounds_max"]) == ("aiohttp", "req_per_s", 5)
        assert len(row["ours"]) == len(row["minimal"]) == row["rounds_done"] >= 1
        assert row["ratio"] > 0
        if browser is not None:
            look_at_the_page(browser, url, Path(os.environ.get("LIVE_SCREENSHOTS", tmp_path)))
        assert run.wait() == 0, run.text()


def has_chromium() -> bool:
    return tool_path("chromium") is not None


# the bench's table: its cells (None: the section hidden)
BENCH_CELLS = """
document.getElementById('bench-section').hidden ? null
  : [...document.querySelectorAll('#bench tbody td')].map((td) => td.textContent)
"""


def look_at_the_page(browser: Browser, url: str, screens: Path) -> None:
    """The page at 1280 px: the bench's table has its row (ours · minimal, the ratio),
    nothing sticks out sideways, the script threw nothing."""
    tab = Tab(browser, url, 1280)
    page = tab.read_when(lambda p: p["stream"] == "live" and p["case"].startswith("aiohttp"), 30)
    deadline = time.monotonic() + 30
    while True:
        cells = browser.send(
            "Runtime.evaluate", {"expression": BENCH_CELLS, "returnByValue": True}, tab.session
        )["result"].get("value")
        # one framework's row, every column, from the second round on with an interval
        if cells and len(cells) == 7 and "[" in cells[5]:
            break
        assert time.monotonic() < deadline, cells
        time.sleep(0.3)
    assert cells[:3] == ["aiohttp", "h1", "req/s"] and "×" in cells[5], cells
    page = tab.read_when(lambda p: p["figures"][1] != "–", 10)  # a second of the app's CPU
    assert page["scroll_width"] <= page["window_width"], page
    tab.screenshot(screens / "benchlive-1280.png")
    assert browser.console_errors() == []

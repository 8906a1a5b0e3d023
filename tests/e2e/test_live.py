"""`--live` and `--prometheus` on real smoke compares: the page opened in headless Chromium
changes as the run goes; the metrics scraped twice, parsed as Prometheus would, grow and
name the case; a browser killed mid-run and twenty event streams at once (some never
read) leave the run as it would have been. Without Chromium or wrk the tests skip.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.live.session import start_live
from model.errors import UserError
from model.results import read_run
from tests.browser import Browser, chromium
from tests.helpers import harness, require_framework, require_tool, require_tools

URL_WAIT_S = 60.0  # the harness imports, then prints the URLs before anything else
RUN_TIMEOUT_S = 150.0
# longer steps than smoke's 2 s, so two looks a few seconds apart fall in one case
LONGER_STEPS = ("--set", "ramp.duration_s=4")
# no warm-up or cool-down around the steps: the watchers look at the steps themselves
NO_PAUSES = ("--set", "warmup_s=0", "--set", "cooldown_s=0")
# one step (concurrency 10) where the test needs one case under load, not a ramp
ONE_STEP = ("--set", "ramp.stop=10")


@dataclass
class LiveRun:
    """A `harness compare` running in the background, its output in a file."""

    process: subprocess.Popen[str]
    output: Path
    out_dir: Path

    def text(self) -> str:
        return self.output.read_text()

    def url(self, prefix: str) -> str:
        """The URL the harness printed after `prefix` (`live page:`), waited for."""
        deadline = time.monotonic() + URL_WAIT_S
        while time.monotonic() < deadline:
            found = re.search(rf"^{re.escape(prefix)} (\S+)$", self.text(), re.MULTILINE)
            if found:
                return found.group(1)
            assert self.process.poll() is None, self.text()
            time.sleep(0.2)
        raise AssertionError(f"no {prefix} line in time: {self.text()}")

    def wait(self) -> int:
        return self.process.wait(timeout=RUN_TIMEOUT_S)


@contextlib.contextmanager
def live_compare(tmp_path: Path, *args: str) -> Iterator[LiveRun]:
    """`harness compare --profile smoke ARGS` in the background; stopped if still running."""
    executable = shutil.which("harness")
    assert executable, "the harness console script is not installed"
    output = tmp_path / "harness.out"
    out_dir = tmp_path / "results"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [executable, "compare", "--profile", "smoke", "--out", str(out_dir), *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    try:
        yield LiveRun(process, output, out_dir)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def only_run(out_dir: Path) -> Any:
    (run_dir,) = out_dir.iterdir()
    return read_run(run_dir)


# -- the page in a browser --------------------------------------------------------------

# what the page shows: its figures' text and its charts' pixels
READ_PAGE = """
(() => ({
  title: document.getElementById('title').textContent,
  stream: document.getElementById('stream').textContent,
  status: document.getElementById('status').textContent,
  elapsed: document.getElementById('elapsed').textContent,
  case: document.getElementById('case').textContent,
  step: document.getElementById('step').textContent,
  figures: ['rate', 'cpu', 'rss', 'tick', 'last-step'].map(
    (id) => document.getElementById(id).textContent),
  charts: [...document.querySelectorAll('canvas')].map((c) => c.toDataURL().length),
  chart: document.getElementById('chart-rate').toDataURL(),
  settled: document.querySelectorAll('#settled tbody tr').length,
  report: document.getElementById('report').hidden ? null
    : document.getElementById('report-link').getAttribute('href'),
  scroll_width: document.documentElement.scrollWidth,
  window_width: document.documentElement.clientWidth,
}))()
"""


class Tab:
    """One page of the browser, `width_px` wide."""

    def __init__(self, browser: Browser, url: str, width_px: int) -> None:
        self.browser = browser
        self.target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.send(
            "Target.attachToTarget", {"targetId": self.target, "flatten": True}
        )["sessionId"]
        for domain in ("Page", "Runtime"):
            browser.send(f"{domain}.enable", session=self.session)
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width_px, "height": 900, "deviceScaleFactor": 1, "mobile": width_px < 500},
            session=self.session,
        )
        browser.send("Page.navigate", {"url": url}, session=self.session)

    def read(self) -> dict[str, Any] | None:
        """What the page shows (None while it is still loading: its elements not there)."""
        return self.browser.send(
            "Runtime.evaluate", {"expression": READ_PAGE, "returnByValue": True}, self.session
        )["result"].get("value")

    def read_when(self, ready: Any, timeout_s: float = 60.0) -> dict[str, Any]:
        """The page once `ready(page)` holds."""
        deadline = time.monotonic() + timeout_s
        while True:
            page = self.read()
            if page is not None and ready(page):
                return page
            assert time.monotonic() < deadline, page
            time.sleep(0.3)

    def screenshot(self, path: Path) -> None:
        """The whole page, as PNG."""
        size = self.browser.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.browser.send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
            session=self.session,
        )
        path.write_bytes(base64.b64decode(shot["data"]))


def measuring(page: dict[str, Any]) -> bool:
    """The page shows a case under load: its req/s figure drawn."""
    return (
        page["stream"] == "live"
        and page["case"] not in ("–", "between cases")
        and page["figures"][0] != "–"
    )


def test_the_live_page_changes_as_the_run_goes(tmp_path: Path) -> None:
    """Two looks a few seconds apart at a smoke compare's page differ (its figures and its
    charts), at a desktop's and a phone's width, and nothing sticks out sideways; at the
    end the page links the report. Screenshots go to LIVE_SCREENSHOTS when it is set."""
    require_tool("chromium")
    require_tools("wrk")
    require_framework("aiohttp")
    require_framework("tornado")
    screens = Path(os.environ.get("LIVE_SCREENSHOTS", tmp_path))
    with (
        live_compare(
            tmp_path, "--frameworks", "aiohttp,tornado", "--live", "0", *LONGER_STEPS, *NO_PAUSES
        ) as run,
        chromium(tmp_path / "chromium-profile") as browser,
    ):  # fmt: skip
        url = run.url("live page:")
        assert url.startswith("http://127.0.0.1:")
        assert run.text().startswith("live page:")  # before anything else is printed
        wide, narrow = Tab(browser, url, 1280), Tab(browser, url, 390)
        first = wide.read_when(measuring)
        time.sleep(3)
        second = wide.read_when(
            lambda page: (
                measuring(page)
                and page["figures"] != first["figures"]
                and page["chart"] != first["chart"]
            ),  # the lines grew
            20,
        )
        assert second["elapsed"] != first["elapsed"]

        # the second server under load, the first one's figures settled beside it
        def second_case(page: dict[str, Any]) -> bool:
            return (
                measuring(page) and page["case"].startswith("tornado") and page["figures"][4] != "–"
            )

        later = wide.read_when(second_case, 60)
        phone = narrow.read_when(second_case, 10)
        for tab, page, width in ((wide, later, 1280), (narrow, phone, 390)):
            assert page["scroll_width"] <= page["window_width"], page
            tab.screenshot(screens / f"live-{width}.png")
        assert run.wait() == 0, run.text()
        done = wide.read_when(lambda page: page["report"] is not None, 10)
        assert done["status"] == "complete"
        assert done["title"] == f"serverbench live: {only_run(run.out_dir).run_id}"
        assert done["settled"] == 2
        assert done["report"].endswith("/report/report.html")
        assert browser.console_errors() == []  # the script threw nothing
    for width in (1280, 390):
        assert (screens / f"live-{width}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the metrics --------------------------------------------------------------------------


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed by prometheus_client's own text parser."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def threads_cpus(pid: int) -> list[set[int]]:
    """The CPUs each thread of process `pid` may run on."""
    placed = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            placed.append(os.sched_getaffinity(int(task.name)))
    return placed


def counted(samples: dict[Any, float], name: str) -> dict[Any, float]:
    return {key: value for key, value in samples.items() if key[0] == name}


def test_prometheus_scrapes_grow_and_name_the_case(tmp_path: Path) -> None:
    """Two scrapes during a smoke run: the server's request counter grew between them,
    its labels name the case, and the gauges of the case running are there; the live
    servers' threads run where the rest of the harness does."""
    require_tools("wrk")
    require_framework("aiohttp")
    # smoke's two steps, of 4 s: with one, a loaded machine ended the run before a scrape
    with live_compare(
        tmp_path, "--frameworks", "aiohttp", "--live", "0", "--prometheus", "0",
        *LONGER_STEPS, *NO_PAUSES,
    ) as run:  # fmt: skip
        url = run.url("prometheus metrics:")
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        deadline = time.monotonic() + URL_WAIT_S
        while True:
            first = scrape(url)
            if any(v > 0 for v in counted(first, "harness_server_requests_total").values()):
                break
            assert time.monotonic() < deadline and run.process.poll() is None, run.text()
            time.sleep(0.3)
        # meanwhile every thread of the harness, the servers' among them, is on the load's
        # CPUs (the smoke profile's: all but the first), off the server's
        placed = threads_cpus(run.process.pid)
        # the next scrape whose counter moved (a fixed wait could outlast a short run)
        grown = sum(counted(first, "harness_server_requests_total").values())
        while True:
            time.sleep(0.3)
            second = scrape(url)
            if sum(counted(second, "harness_server_requests_total").values()) > grown:
                break
            assert time.monotonic() < deadline and run.process.poll() is None, run.text()
        assert run.wait() == 0, run.text()
    if len(os.sched_getaffinity(0)) > 1:
        first_cpu = min(os.sched_getaffinity(0))
        assert len(placed) >= 4 and all(first_cpu not in cpus for cpus in placed), placed
    before = counted(first, "harness_server_requests_total")
    after = counted(second, "harness_server_requests_total")
    ((key, value),) = before.items()
    assert after[key] > value
    labels = dict(key[1])
    assert labels == {"framework": "aiohttp", "protocol": "h1", "case": "aiohttp [both]"}
    gauges = {name for name, _ in first}
    for name in ("harness_server_cpu_ratio", "harness_server_rss_bytes", "harness_run_info"):
        assert name in gauges, sorted(gauges)
    assert any(
        dict(k[1]).get("case") == "aiohttp [both]" for k in counted(first, "harness_step_info")
    )


# -- what the watchers cannot do to the run ---------------------------------------------


def hold_streams(url: str, count: int, stop: threading.Event) -> list[threading.Thread]:
    """`count` event streams on `url`: the even ones read all they get, the odd ones
    never read a byte after their request (a stalled tab)."""
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()  # type: ignore[union-attr]
    request = f"GET /events HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n"

    def hold(reads: bool) -> None:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(request.encode())
            while not stop.is_set():
                if reads:
                    with contextlib.suppress(TimeoutError):
                        if not sock.recv(65536):
                            return
                else:
                    stop.wait(0.2)

    threads = [
        threading.Thread(target=hold, args=(index % 2 == 0,), daemon=True) for index in range(count)
    ]
    for thread in threads:
        thread.start()
    return threads


def run_shape(out_dir: Path) -> list[tuple[str, str, int]]:
    """Each case's framework, status and number of steps."""
    return [(c.framework, c.status, len(c.steps)) for c in only_run(out_dir).cases]


def test_watchers_change_nothing_in_the_run(tmp_path: Path) -> None:
    """The same smoke run without --live, then with it while twenty event streams are
    held open (half of them never read) and a browser that is killed mid-run: every case
    ok and the same steps."""
    require_tool("chromium")
    require_tools("wrk")
    require_framework("aiohttp")
    plain = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", *ONE_STEP, *NO_PAUSES,
        "--out", str(tmp_path / "plain"), timeout_s=RUN_TIMEOUT_S,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stdout + plain.stderr
    expected = run_shape(tmp_path / "plain")
    assert expected and all(status == "ok" for _, status, _ in expected)
    stop = threading.Event()
    watched = tmp_path / "watched"
    watched.mkdir()
    with live_compare(
        watched, "--frameworks", "aiohttp", "--live", "0", *ONE_STEP, *NO_PAUSES
    ) as run:
        url = run.url("live page:")
        streams = hold_streams(url, 20, stop)
        browser = Browser(tmp_path / "chromium-profile")
        try:
            tab = Tab(browser, url, 1280)
            tab.read_when(measuring)
            os.killpg(browser.process.pid, signal.SIGKILL)  # the browser dies mid-run
        finally:
            browser.close()
        status = run.wait()
        stop.set()
    for thread in streams:
        thread.join(10)
    assert status == 0, run.text()
    assert run_shape(run.out_dir) == expected


def test_state_json_is_the_events_state(tmp_path: Path) -> None:
    """/state.json and the first event of /events say the same run (what a script may
    read instead of the page)."""
    require_tools("wrk")
    require_framework("aiohttp")
    with live_compare(
        tmp_path, "--frameworks", "aiohttp", "--live", "0", *ONE_STEP, *NO_PAUSES
    ) as run:
        url = run.url("live page:")
        deadline = time.monotonic() + URL_WAIT_S
        while True:
            with urllib.request.urlopen(url + "state.json", timeout=10) as reply:
                state = json.load(reply)
            if state.get("run_id"):
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.3)
        with urllib.request.urlopen(url + "events", timeout=10) as stream:
            assert stream.headers["Content-Type"] == "text/event-stream"
            lines = [stream.readline() for _ in range(4)]
        assert run.wait() == 0, run.text()
    data = next(line for line in lines if line.startswith(b"data: "))
    assert json.loads(data[6:])["run_id"] == state["run_id"] == only_run(run.out_dir).run_id


# -- the servers themselves, in this process --------------------------------------------


def test_the_page_serves_the_report_once_the_run_ended(tmp_path: Path) -> None:
    """Before the end the report is not there; after it, /report/ serves the run's
    directory and the state links it; the metrics' server serves only /metrics."""
    said: list[str] = []
    session = start_live("0", "127.0.0.1:0")
    assert session is not None
    session.announce(said.append)
    try:
        page, metrics = session.servers["page"].url, session.servers["metrics"].url
        assert said == [f"live page: {page}", f"prometheus metrics: {metrics}metrics"]
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "report.html").write_text("<p>the report</p>")
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(page + "report/report.html", timeout=5)
        url = session.finished("complete", run_dir / "report.html")
        assert url == page + "report/report.html"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.read() == b"<p>the report</p>"
        with urllib.request.urlopen(page, timeout=5) as reply:
            assert b'<script src="/static/live.js">' in reply.read()
        with urllib.request.urlopen(page + "static/live.js", timeout=5) as reply:
            assert b"EventSource" in reply.read()
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(metrics, timeout=5)  # the page is not on it
    finally:
        session.close()


def test_a_port_in_use_is_one_line_naming_the_option() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"--prometheus: cannot listen on 127.0.0.1:{port}"):
            start_live(None, str(port))


def test_an_ipv6_loopback_address_is_served() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        session = start_live("[::1]:0", None)
    except UserError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    assert session is not None
    try:
        url = session.servers["page"].url
        assert url.startswith("http://[::1]:")
        with urllib.request.urlopen(url + "state.json", timeout=5) as reply:
            assert json.load(reply) == {"status": "starting"}
    finally:
        session.close()


def test_a_scrape_before_the_plan_is_empty_not_missing() -> None:
    """The exporter listens before the plan is made (its URL is printed first): a scrape
    then reads an empty exposition (200), so a scraper does not mark the target down; any
    other path is 404."""
    from harness.live.server import Hub, LiveServer

    server = LiveServer("127.0.0.1", 0, Hub(), "metrics")
    try:
        assert scrape(f"{server.url}metrics") == {}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.url}other", timeout=10)
        assert refused.value.code == 404
    finally:
        server.close()

"""The live page's state and the exporter's metrics (harness.live), without a network: the
reporter events accumulated, the time left, the labels parsed, the metric families named
and parsed back as a Prometheus server would, the listen addresses checked."""

from __future__ import annotations

import json
import queue
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.cli.live_options import with_default_ports
from harness.live.address import parse_listen
from harness.live.metrics import METRICS, exposition, run_registry
from harness.live.reporters import LiveReporter, Reporters
from harness.live.server import CLIENT_QUEUE, Hub, page_html
from harness.live.state import MAX_POINTS_PER_CASE, LiveState, parse_case_label
from model.errors import UserError
from model.results import Case, Step


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def make_step(**overrides: Any) -> Step:
    fields: dict[str, Any] = {
        "offered": 10,
        "unit": "concurrency",
        "achieved": 3000.0,
        "replies": 6000,
        "errors": {"total": 3, "timeout": 2, "connect": 1},
        "error_rate": 0.0005,
        "latency_ms": dict.fromkeys(("avg", "p90", "p99.9", "p99.99", "max"), None)
        | {"p50": 2.5, "p99": 9.0},
        "flags": ("contended",),
    }
    return Step(**{**fields, **overrides})


def make_case(status: str = "ok", error: str | None = None) -> Case:
    pinned = {"mode": "both", "server": "0", "agent": "1"}
    return Case("aiohttp", "text", "empty", "wrk", "single", pinned, status, error=error)  # type: ignore[arg-type]


def a_row(requests: int, per_s: float | None = 2500.0) -> dict[str, Any]:
    row: dict[str, Any] = {
        "t": 1.0,
        "server_cpu_pct": 55.0,
        "server_rss_bytes": 40_000_000,
        "tick_max_ms": 12.5,
        "open": 10,
        "requests": requests,
        "cpu0_pct": 99.0,  # a host column: kept off the page
    }
    if per_s is not None:
        row["requests_per_s"] = per_s
    return row


def running_state(clock: Clock) -> LiveState:
    state = LiveState(
        run_id="20261207-010000.000-smoke",
        profile="smoke",
        frameworks=("aiohttp", "tornado"),
        cases_total=2,
        step_s=2.0,
        clock=clock,
    )
    state.case_started(label="aiohttp [both]", steps=2)
    state.step_started(index=0, offered=10, unit="concurrency")
    return state


@pytest.mark.parametrize(
    ("label", "framework", "protocol", "round_index"),
    [
        ("aiohttp [both]", "aiohttp", "h1", None),
        ("nginx [server] #2 workers:2 h1-tls", "nginx", "h1-tls", None),
        ("tornado [both] h2c round 3 of 5", "tornado", "h2c", 3),
        ("granian [none] round 7 of at most 12", "granian", "h1", 7),
    ],
)
def test_a_case_label_names_its_framework_protocol_and_round(
    label: str, framework: str, protocol: str, round_index: int | None
) -> None:
    parsed = parse_case_label(label)
    assert (parsed.framework, parsed.protocol, parsed.round) == (framework, protocol, round_index)


def test_events_accumulate_into_the_snapshot() -> None:
    clock = Clock()
    state = running_state(clock)
    for second in range(1, 4):
        clock.now_s += 1
        state.sample(row=a_row(requests=1000 * second))
    snapshot = state.snapshot()
    current = snapshot["current"]
    assert current["case"] == "aiohttp [both]"
    assert current["step"] == {"index": 0, "offered": 10, "unit": "concurrency"}
    assert "cpu0_pct" not in current["row"] and current["row"]["tick_max_ms"] == 12.5
    points = snapshot["series"][0]["points"]
    assert [p[0] for p in points] == [1.0, 2.0, 3.0]
    assert points[0][1:] == [2500.0, 10.0, 55.0, 40_000_000.0, 12.5]
    clock.now_s += 0.5
    state.step_finished(step=make_step())
    snapshot = state.snapshot()
    assert snapshot["series"][0]["steps"][0]["errors"] == {"total": 3, "timeout": 2, "connect": 1}
    assert snapshot["series"][0]["steps"][0]["p99_ms"] == 9.0
    assert [f["flag"] for f in snapshot["flags"]] == ["contended"]
    view = state.metric_view()
    (case,) = view["cases"]
    assert case["replies_total"] == 6000
    assert case["errors_total"] == {"timeout": 2, "connect": 1}
    # the server's own count: what came after the first reading
    assert case["server_requests_total"] == 2000


def test_a_server_restart_does_not_count_backwards() -> None:
    """A case's server counts from 0 again (a new case, or a restarted worker): the
    counter only grows."""
    clock = Clock()
    state = running_state(clock)
    for requests in (5000, 6000, 100, 900):
        state.sample(row=a_row(requests=requests))
    assert state.metric_view()["cases"][0]["server_requests_total"] == 1000 + 800


def test_time_left_in_the_step_and_the_run() -> None:
    clock = Clock()
    state = running_state(clock)
    clock.now_s += 0.5
    assert state.time_left() == {"step_s": 1.5, "run_s": None}  # no case finished yet
    clock.now_s += 9.5  # the first case took 10 s
    state.step_finished(step=make_step())
    state.case_finished(case=make_case())
    assert state.time_left() == {"step_s": None, "run_s": 10.0}
    state.case_started(label="tornado [both]", steps=2)
    clock.now_s += 4
    assert state.time_left()["run_s"] == 6.0
    clock.now_s += 20  # longer than the mean: nothing negative
    assert state.time_left()["run_s"] == 0.0


def test_a_rounds_step_left_is_from_the_rounds_length() -> None:
    clock = Clock()
    state = LiveState(
        run_id="r", profile="quick", frameworks=("aiohttp",), cases_total=3,
        step_s=10.0, round_s=3.0, clock=clock,
    )  # fmt: skip
    state.case_started(label="aiohttp [both] round 1 of 2", steps=1)
    state.step_started(index=0, offered=64, unit="concurrency")
    clock.now_s += 1
    assert state.time_left()["step_s"] == 2.0


def test_a_failed_case_is_a_flag_and_leaves_the_current_slot() -> None:
    clock = Clock()
    state = running_state(clock)
    state.case_finished(case=make_case("failed", "server exited 1"))
    snapshot = state.snapshot()
    assert snapshot["current"] is None
    assert snapshot["series"][0]["status"] == "failed"
    assert snapshot["flags"][-1]["flag"] == "failed"
    assert snapshot["flags"][-1]["meaning"] == "server exited 1"


def test_a_long_case_keeps_a_bounded_series() -> None:
    clock = Clock()
    state = running_state(clock)
    for _ in range(3 * MAX_POINTS_PER_CASE):
        clock.now_s += 1
        state.sample(row=a_row(requests=1))
    points = state.snapshot()["series"][0]["points"]
    assert MAX_POINTS_PER_CASE // 2 <= len(points) <= MAX_POINTS_PER_CASE
    assert points[-1][0] > points[0][0]  # still the whole case, thinned


def test_each_change_moves_the_version_a_reader_waits_on() -> None:
    clock = Clock()
    state = running_state(clock)
    seen = state.version
    assert state.wait_change(seen, timeout_s=0.01) == seen  # nothing changed
    state.sample(row=a_row(requests=1))
    assert state.wait_change(seen, timeout_s=0.01) == seen + 1


def test_the_metrics_parse_back_with_the_case_in_their_labels() -> None:
    clock = Clock()
    state = running_state(clock)
    state.sample(row=a_row(requests=100))
    state.sample(row=a_row(requests=400))
    state.step_finished(step=make_step())
    state.step_started(index=1, offered=20, unit="concurrency")
    state.sample(row=a_row(requests=900))
    text = generate_latest(run_registry(state)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # the text format has no info type: an info metric is a gauge named ..._info
    assert {name.removesuffix("_info") for name in families} <= set(METRICS)
    samples = {s.name: s for f in families.values() for s in f.samples}
    per_second = samples["harness_replies_per_second"]
    case_labels = {"framework": "aiohttp", "protocol": "h1", "case": "aiohttp [both]"}
    assert per_second.labels == case_labels | {"step": "1"}
    assert per_second.value == 2500.0
    assert samples["harness_server_cpu_ratio"].value == pytest.approx(0.55)
    assert samples["harness_tick_lag_seconds"].value == pytest.approx(0.0125)
    assert samples["harness_server_requests_total"].value == 800
    assert samples["harness_replies_total"].value == 6000
    errors = {s.labels["kind"]: s.value for s in families["harness_errors"].samples}
    assert errors == {"connect": 1, "timeout": 2}
    assert samples["harness_step_info"].labels["offered"] == "20"
    assert families["harness_run_info"].samples[0].labels["run_id"] == "20261207-010000.000-smoke"


def test_between_cases_no_gauge_describes_a_case() -> None:
    clock = Clock()
    state = running_state(clock)
    state.sample(row=a_row(requests=100))
    state.case_finished(case=make_case())
    text = generate_latest(run_registry(state)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert "harness_server_cpu_ratio" not in families
    assert families["harness_cases_finished"].samples[0].labels == {"status": "ok"}
    assert families["harness_cases_finished"].samples[0].value == 1


@pytest.mark.parametrize(
    ("spec", "host", "port", "public"),
    [
        ("0", "127.0.0.1", 0, False),
        ("8089", "127.0.0.1", 8089, False),
        ("127.0.0.2:9000", "127.0.0.2", 9000, False),
        ("0.0.0.0:9464", "0.0.0.0", 9464, True),
        ("[::1]:80", "::1", 80, False),
        ("[::]:80", "::", 80, True),
    ],
)
def test_listen_addresses(spec: str, host: str, port: int, public: bool) -> None:
    address = parse_listen(spec, "--live")
    assert (address.host, address.port, address.public) == (host, port, public)


@pytest.mark.parametrize("spec", ["localhost:80", "70000", "abc", "1.2.3.4:", ":80x"])
def test_bad_listen_addresses_are_refused_by_option(spec: str) -> None:
    with pytest.raises(UserError, match="--prometheus"):
        parse_listen(spec, "--prometheus")


class Recording:
    """A reporter that writes down what it was told."""

    def __init__(self, name: str, said: list[str]) -> None:
        self.name, self.said = name, said

    def preparing(self, *, what: str, done: int, total: int) -> None:
        self.said.append(f"{self.name} preparing {what}")

    def case_started(self, *, label: str, steps: int) -> None:
        self.said.append(f"{self.name} case {label}")

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        self.said.append(f"{self.name} step {index}")

    def sample(self, *, row: dict[str, Any]) -> None:
        self.said.append(f"{self.name} sample")

    def step_finished(self, *, step: Step) -> None:
        self.said.append(f"{self.name} step done")

    def case_finished(self, *, case: Case) -> None:
        self.said.append(f"{self.name} case done")


def test_reporters_fan_each_event_out_in_order(tmp_path: Path) -> None:
    said: list[str] = []
    clock = Clock()
    state = running_state(clock)
    both = Reporters(Recording("console", said), LiveReporter(state, tmp_path))
    both.sample(row=a_row(requests=1))
    both.step_finished(step=make_step())
    both.case_finished(case=make_case())  # no run.json there: nothing settled, no error
    assert said == ["console sample", "console step done", "console case done"]
    assert state.snapshot()["series"][0]["status"] == "ok"
    assert state.snapshot()["settled"] == []


def test_a_slow_page_keeps_only_the_newest_events() -> None:
    hub = Hub()
    client = hub.subscribe()
    for index in range(10):
        hub.offer(f"event {index}".encode())
    held = []
    with pytest.raises(queue.Empty):
        while True:
            held.append(client.get_nowait())
    assert held == [f"event {i}".encode() for i in range(10 - CLIENT_QUEUE, 10)]


def test_the_page_escapes_what_it_is_given() -> None:
    page = page_html("<script>alert(1)</script>").decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page


def test_the_docs_and_the_dashboard_name_the_metrics_published() -> None:
    """docs/live.md lists every metric; the Grafana dashboard asks for none but those."""
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "live.md").read_text()
    for name in METRICS:
        assert re.search(rf"`{name}(_total|_info)?`", docs), name
    dashboard = json.loads((root / "docs" / "grafana" / "harness.json").read_text())
    asked = {
        re.sub(r"_(total|info)$", "", name)
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"harness_\w+", target["expr"])
    }
    assert asked and asked <= set(METRICS), asked - set(METRICS)


def test_the_report_is_served_from_the_run_directory_only(tmp_path: Path) -> None:
    hub = Hub()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.html").write_text("report")
    (tmp_path / "secret.txt").write_text("not the run's")
    assert hub.report_file("report.html") is None  # nothing before the report is drawn
    hub.report_dir = tmp_path / "run"
    assert hub.report_file("report.html") == (tmp_path / "run" / "report.html").resolve()
    assert hub.report_file("../secret.txt") is None
    assert hub.report_file("/etc/passwd") is None


@pytest.mark.parametrize(
    ("argv", "completed"),
    [
        (["compare", "--live"], ["compare", "--live", "8089"]),
        (
            ["compare", "--live", "--profile", "smoke"],
            ["compare", "--live", "8089", "--profile", "smoke"],
        ),
        (
            ["compare", "--live", "0", "--prometheus"],
            ["compare", "--live", "0", "--prometheus", "9464"],
        ),
        (["compare", "--live=0"], ["compare", "--live=0"]),
        (["compare", "--", "--live"], ["compare", "--", "--live"]),
    ],
)
def test_a_bare_option_takes_its_default_port(argv: list[str], completed: list[str]) -> None:
    assert with_default_ports(argv) == completed


def test_a_scraper_asking_for_openmetrics_gets_it() -> None:
    """Prometheus asks for OpenMetrics; anything else gets the text format."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

    state = running_state(Clock())
    state.sample(row=a_row(requests=100))
    registry = run_registry(state)
    body, content_type = exposition(registry, "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    names = {family.name for family in parse_om(body.decode())}
    assert {"harness_server_requests", "harness_server_cpu_ratio", "harness_run"} <= names
    body, content_type = exposition(registry, None)
    assert content_type.startswith("text/plain")
    assert not body.decode().rstrip().endswith("# EOF")


class FailingState(LiveState):
    """A state whose samples fail, as a bug in the live view would."""

    def sample(self, *, row: dict[str, Any]) -> None:
        raise KeyError("requests_per_s")


def test_a_failing_live_view_stops_itself_not_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = FailingState(
        run_id="r", profile="smoke", frameworks=("aiohttp",), cases_total=1, step_s=2.0
    )
    reporter = LiveReporter(state, tmp_path)
    reporter.case_started(label="aiohttp [both]", steps=2)
    reporter.sample(row=a_row(requests=1))  # raises inside: said, not raised
    reporter.sample(row=a_row(requests=2))
    reporter.step_finished(step=make_step())  # no longer fed
    assert reporter.broken == "KeyError: 'requests_per_s'"
    assert capsys.readouterr().err.count("the live view stopped") == 1
    assert state.snapshot()["series"][0]["steps"] == []


def test_run_options_refuse_a_bad_address_before_anything_starts() -> None:
    from harness.run_options import RunOptions

    assert RunOptions(live_address="0", prometheus_address="127.0.0.1:9464").live_address == "0"
    with pytest.raises(UserError, match="--live localhost:80: 'localhost' is not an IP"):
        RunOptions(live_address="localhost:80")

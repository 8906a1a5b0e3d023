"""The boards' workloads' pure rules: the servers' shared ones (servers/core/workloads.py),
the scenarios and the wrk script they make, nginx's locations, and the delay scenario's
reading (harness/run/delay.py) on a captured run's steps."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from charts.tables import HELD
from drivers.base import Target
from drivers.wrk import lua_script
from harness.run.delay import delay_ms_of, held_in_flight
from model.results import Case, Step
from model.scenarios import DELAY_MS, HEADERS, LONG_DELAY_MS, PIPELINING, SCENARIOS, Scenario
from servers import contract
from servers.baselines.nginx.workloads import workload_locations, write_workload_files
from servers.core import workloads

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.parametrize(
    ("segment", "delay_ms"),
    [
        *[("0", 0), ("10", 10), ("10000", 10_000), ("10001", None), ("123456", None)],
        *[("", None), ("abc", None), ("-5", None), ("1.5", None), ("٣", None)],
    ],
)
def test_a_delay_segment_is_whole_milliseconds_within_the_bound(
    segment: str, delay_ms: int | None
) -> None:
    assert workloads.delay_ms(segment) == delay_ms


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        *[("gzip", True), ("deflate, GZIP", True), ("gzip;q=0.5", True), ("x-gzip", True)],
        *[("gzip;q=0", False), ("gzip; q=0.0", False), ("br", False), (None, False), ("", False)],
    ],
)
def test_gzip_is_chosen_by_accept_encoding(accept_encoding: str | None, gzipped: bool) -> None:
    assert workloads.wants_gzip(accept_encoding) is gzipped


def test_the_json_comp_body_is_the_document_either_way() -> None:
    identity = workloads.json_comp_body(gzipped=False)
    assert 9_000 < len(identity) < 11_000  # ~10 KB, as HttpArena's json-comp
    assert json.loads(identity) == contract.JSON_COMP_DOCUMENT
    assert json.loads(gzip.decompress(workloads.json_comp_body(gzipped=True))) == (
        contract.JSON_COMP_DOCUMENT
    )
    assert len(contract.BODY_10K) == contract.BODY_10K_BYTES == 10 * 1024


def test_an_upload_over_the_limit_is_refused_before_it_is_read() -> None:
    assert workloads.upload_refusal(contract.UPLOAD_MAX_BODY_BYTES) is None
    assert workloads.upload_refusal(None) is None  # chunked: judged as it arrives
    assert workloads.upload_refusal(contract.UPLOAD_MAX_BODY_BYTES + 1) == 413
    assert max(contract.UPLOAD_SIZES_BYTES) <= contract.UPLOAD_MAX_BODY_BYTES


def test_a_chunked_upload_is_counted_to_its_own_limit() -> None:
    counter = workloads.upload_counter()
    assert counter.take(contract.UPLOAD_MAX_BODY_BYTES)
    assert not counter.take(1)
    assert workloads.upload_reply(counter.received_bytes) == b"%d" % (
        contract.UPLOAD_MAX_BODY_BYTES + 1
    )


def test_the_workload_scenarios_ask_for_what_their_boards_do() -> None:
    assert SCENARIOS["plaintext"].pipeline_depth == contract.PIPELINE_DEPTH == 16
    assert SCENARIOS["plaintext"].needs == {PIPELINING}
    assert SCENARIOS["json-comp"].needs == {HEADERS}
    assert SCENARIOS["json"].needs == frozenset()
    assert SCENARIOS["delay"].route == contract.ROUTE_DELAY_PREFIX
    assert delay_ms_of(SCENARIOS["delay"].path) == DELAY_MS
    assert delay_ms_of(SCENARIOS["delay-100"].path) == LONG_DELAY_MS
    assert delay_ms_of(contract.ROUTE_JSON) is None
    sizes = [len(SCENARIOS[name].body or b"") for name in ("upload", "upload-1m")]
    assert tuple(sizes) == contract.UPLOAD_SIZES_BYTES
    with pytest.raises(ValueError, match="pipeline_depth"):
        Scenario("x", "x", "GET", "/", pipeline_depth=0)


def test_wrk_pipelines_the_plaintext_scenario_and_sends_json_comp_its_header() -> None:
    plaintext = lua_script(Target("127.0.0.1", 8080, SCENARIOS["plaintext"]))
    assert f"depth = {contract.PIPELINE_DEPTH}" in plaintext
    assert "table.concat(batch)" in plaintext and "return pipelined" in plaintext
    json_comp = lua_script(Target("127.0.0.1", 8080, SCENARIOS["json-comp"]))
    assert 'wrk.headers["Accept-Encoding"] = "gzip"' in json_comp
    assert "pipelined" not in json_comp


def test_nginx_serves_the_fixed_bodies_and_the_10kb_ones_from_files(tmp_path: Path) -> None:
    write_workload_files(tmp_path)
    assert json.loads((tmp_path / "json-comp.json").read_text()) == contract.JSON_COMP_DOCUMENT
    assert (tmp_path / "body-10k").read_bytes() == contract.BODY_10K
    locations = workload_locations(tmp_path)
    for route in (contract.ROUTE_JSON, contract.ROUTE_PLAINTEXT, contract.ROUTE_BODY_10K):
        assert f"location = {route} " in locations
    assert f"gzip_comp_level {contract.GZIP_LEVEL};" in locations
    assert contract.ROUTE_JSON_COMP not in workload_locations(None)


def _captured_steps(path: Path, framework: str) -> list[Step]:
    """The steps of one framework's case in a captured steps.csv (the delay profile, short)."""
    steps = []
    with path.open() as rows:
        for row in csv.DictReader(rows):
            if row["framework"] != framework or row["status"] != "ok":
                continue
            steps.append(
                Step(
                    offered=float(row["offered"]),
                    unit=row["unit"],
                    achieved=float(row["achieved"]),
                    replies=int(row["replies"]),
                    errors={"total": int(row["errors_total"])},
                    error_rate=float(row["error_rate"]),
                    latency_ms={
                        key: float(row[f"latency_{key}_ms"]) if row[f"latency_{key}_ms"] else None
                        for key in ("avg", "p50", "p90", "p99", "p99.9", "p99.99", "max")
                    },
                )
            )
    return steps


def test_held_in_flight_is_the_highest_step_within_twice_the_delay() -> None:
    """A captured delay run (aiohttp and twisted, /delay/10, concurrency 4 to 1,024 on a
    busy 2-core host): p99 never within 20 ms there, so none held; read against a 30 ms
    delay (60 ms), each held 16 (aiohttp's 64 read 60.5 ms, twisted's 143 ms)."""
    path = DATA / "delay_steps.csv"
    for framework in ("aiohttp", "twisted"):
        steps = _captured_steps(path, framework)
        assert [s.offered for s in steps] == [4, 16, 64, 256, 1024]
        assert held_in_flight(steps, 10) is None
        held = held_in_flight(steps, 30)
        assert held is not None and held["concurrency"] == 16 and held["limit_ms"] == 60
        assert held["p99_ms"] <= 60 and held["req_s"] == steps[1].achieved


def test_a_step_with_errors_holds_nothing() -> None:
    steps = _captured_steps(DATA / "delay_steps.csv", "twisted")
    failed = [
        Step(
            offered=s.offered,
            unit=s.unit,
            achieved=s.achieved,
            replies=s.replies,
            errors={"total": 1},
            error_rate=0.01,
            latency_ms=s.latency_ms,
        )
        for s in steps
    ]
    assert held_in_flight(failed, 30) is None


def test_the_delay_table_lists_the_measured_cases_only() -> None:
    steps = tuple(_captured_steps(DATA / "delay_steps.csv", "twisted"))
    held = held_in_flight(steps, 30)
    pinned = {"server": "0", "agent": "1"}
    measured = Case("twisted", "delay-100", "empty", "wrk", "single", pinned, "ok", steps=steps)
    measured = dataclasses.replace(
        measured, summary=dataclasses.replace(measured.summary, held_in_flight=held)
    )
    skipped = Case(
        "nginx", "delay-100", "empty", "wrk", "single", pinned, "skipped", error="not supported"
    )
    other = Case("aiohttp", "json", "empty", "wrk", "single", pinned, "ok", steps=steps)
    table = HELD.render([measured, skipped, other], "compact")
    assert [[cell.text for cell in row] for row in table.cells] == [
        ["twisted", "16", "27.7", "60", "926"]
    ]

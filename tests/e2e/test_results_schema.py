"""Runs written in older schemas still open: harness.run/1 (captured from the code before the
runner split), harness.run/2 (run_v1 as /2 wrote it), harness.run/3 (a smoke run of
aiohttp and nginx before histograms) and harness.run/4 (a smoke run of aiohttp and nginx
before protocols) are upgraded by `read_run` to the current schema, with a status, and
`harness report` draws them."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model.results import (
    SCHEMA,
    SCHEMA_1,
    SCHEMA_2,
    SCHEMA_3,
    SCHEMA_4,
    SCHEMA_5,
    Case,
    Negotiated,
    Run,
    Summary,
    read_run,
    run_from_dict,
    write_run,
)

DATA = Path(__file__).parents[1] / "data"
RUNS_1 = ("run_v1", "run_v1_ws")  # aiohttp and nginx on wrk; aiohttp under 200 WebSockets


@pytest.mark.parametrize("name", RUNS_1)
def test_a_run_1_file_is_read_as_run_2(name: str) -> None:
    on_disk = json.loads((DATA / name / "run.json").read_text())
    assert on_disk["schema"] == SCHEMA_1
    run = read_run(DATA / name)
    assert run.schema == SCHEMA
    for case, written in zip(run.cases, on_disk["cases"], strict=True):
        assert isinstance(case.summary, Summary)
        for key, value in written["summary"].items():  # every /1 key kept, same meaning
            read = getattr(case.summary, key)
            assert (list(read) if isinstance(read, tuple) else read) == value, key
        assert case.summary.repeats == 1  # absent from /1 when a case ran once


def test_the_upgraded_run_has_its_figures() -> None:
    [aiohttp, nginx] = read_run(DATA / "run_v1").cases
    assert nginx.summary.role == "baseline" and nginx.summary.ratio_to_nginx == 1.0
    assert aiohttp.summary.ratio_to_nginx == pytest.approx(
        aiohttp.summary.peak / nginx.summary.peak, abs=1e-3
    )
    [ws] = read_run(DATA / "run_v1_ws").cases
    assert ws.summary.peak_unit == "conns"
    assert ws.summary.peak == 200 and ws.summary.breaking_point is None
    assert ws.summary.limits is not None and ws.summary.ratio_to_nginx is None


def test_a_run_1_file_rewritten_is_run_2_and_reads_back_equal(tmp_path: Path) -> None:
    run = read_run(DATA / "run_v1")
    write_run(run, tmp_path)
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["schema"] == SCHEMA
    assert set(written["cases"][0]["summary"]) == {f for f in Summary.__dataclass_fields__}
    assert read_run(tmp_path) == run


@pytest.mark.parametrize("name", [*RUNS_1, "run_v2", "run_v3", "run_v4", "run_v5"])
def test_harness_report_draws_an_older_run_directory(tmp_path: Path, name: str) -> None:
    run_dir = tmp_path / name
    shutil.copytree(DATA / name, run_dir)
    done = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (run_dir / "report.html").stat().st_size > 1000
    assert list((run_dir / "charts").glob("*.png"))
    written = json.loads((run_dir / "run.json").read_text())["schema"]
    on_disk = {"run_v2": SCHEMA_2, "run_v3": SCHEMA_3, "run_v4": SCHEMA_4, "run_v5": SCHEMA_5}.get(
        name, SCHEMA_1
    )
    assert written == on_disk  # not rewritten
    assert "status: complete" in (run_dir / "report.html").read_text()


def test_an_unknown_summary_key_in_a_run_1_file_is_refused_by_name() -> None:
    data = json.loads((DATA / "run_v1" / "run.json").read_text())
    data["cases"][0]["summary"]["sparkle"] = 1
    with pytest.raises(ValueError, match=r"unknown \['sparkle'\]"):
        run_from_dict(data)


def test_a_run_2_file_with_an_unknown_summary_field_is_refused_by_name(tmp_path: Path) -> None:
    case = Case("aiohttp", "text", "empty", "wrk", "single", {"mode": "both"}, "ok")
    write_run(Run("r1", "2026-11-30T00:00:00Z", None, {}, {}, {}, (case,)), tmp_path)
    data = json.loads((tmp_path / "run.json").read_text())
    data["cases"][0]["summary"]["sparkle"] = 1
    with pytest.raises(ValueError, match=r"unknown summary fields \['sparkle'\]"):
        run_from_dict(data)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"peak_unit": "rps"}, "peak_unit 'rps'"),
        ({"role": "king"}, "role 'king'"),
        ({"peak": float("nan")}, "peak must be a finite number"),
        ({"rss_max_bytes": -1}, "rss_max_bytes must be >= 0"),
        ({"errors_total": 1.5}, "errors_total must be a whole number"),
        ({"repeats": 0}, "repeats must be >= 1"),
        ({"flags": ("sparkly",)}, "unknown summary flags"),
        ({"breaking_point": {"reason": "?"}}, "breaking_point lacks 'connections'"),
    ],
)
def test_invalid_summaries_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Summary(**fields)  # type: ignore[arg-type]


def test_a_case_summary_must_be_a_summary() -> None:
    with pytest.raises(ValueError, match="summary must be a Summary, not dict"):
        Case("a", "text", "empty", "wrk", "single", {}, "ok", summary={"peak": 1})  # type: ignore[arg-type]


def test_a_run_1_and_a_run_2_overlay_in_one_report(tmp_path: Path) -> None:
    from charts.render import render

    old = tmp_path / "old"
    shutil.copytree(DATA / "run_v1", old)
    new = dataclasses.replace(read_run(old), run_id="20261130-170900-smoke")
    write_run(new, tmp_path / "new")
    report = render([old, tmp_path / "new"], tmp_path / "overlay")
    assert report.stat().st_size > 1000
    assert "20261130-170900-smoke" in report.read_text()


# -- harness.run/2 → /3: how the run ended --------------------------------------------------
def test_a_run_1_file_reads_as_complete() -> None:
    run = read_run(DATA / "run_v1")
    assert (run.status, run.status_reason) == ("complete", None)
    assert "interrupted" not in run.config


def run_2(**changes: object) -> dict[str, object]:
    data = json.loads((DATA / "run_v2" / "run.json").read_text())
    assert data["schema"] == SCHEMA_2 and data["config"]["interrupted"] is False
    config = {**data["config"], **changes.pop("config", {})}  # type: ignore[dict-item]
    return {**data, **changes, "config": config}


@pytest.mark.parametrize(
    ("changes", "status", "reason"),
    [
        ({}, "complete", None),
        ({"config": {"interrupted": True}}, "interrupted", "stopped by Ctrl-C (SIGINT)"),
        ({"finished": None}, "unknown", "harness.run/2 recorded no end: killed, failed or running"),
    ],
)
def test_a_run_2_file_gets_the_status_it_recorded(
    changes: dict[str, object], status: str, reason: str | None
) -> None:
    run = run_from_dict(run_2(**changes))
    assert run.schema == SCHEMA
    assert (run.status, run.status_reason) == (status, reason)
    assert "interrupted" not in run.config
    assert [c.framework for c in run.cases] == ["aiohttp", "nginx"]


def test_the_status_is_written_beside_the_times_and_reads_back(tmp_path: Path) -> None:
    run = dataclasses.replace(
        read_run(DATA / "run_v2"), status="interrupted", status_reason="stopped by SIGTERM"
    )
    write_run(run, tmp_path)
    written = json.loads((tmp_path / "run.json").read_text())
    assert list(written)[:6] == [
        "schema", "run_id", "started", "finished", "status", "status_reason",
    ]  # fmt: skip
    assert written["schema"] == SCHEMA == "harness.run/6"
    assert read_run(tmp_path) == run


# -- harness.run/3 → /4: latency kept whole ---------------------------------------------------
def test_a_run_3_file_reads_with_every_percentile_and_no_histograms() -> None:
    on_disk = json.loads((DATA / "run_v3" / "run.json").read_text())
    assert on_disk["schema"] == SCHEMA_3
    run = read_run(DATA / "run_v3")
    assert run.schema == SCHEMA and run.status == "complete"
    for case, written in zip(run.cases, on_disk["cases"], strict=True):
        assert case.summary.knee is None
        for step, old in zip(case.steps, written["steps"], strict=True):
            assert step.latency_ms == {**old["latency_ms"], "p99.9": None, "p99.99": None}
            assert step.histograms == {} and step.latency_uncorrected_ms is None
    assert [c.framework for c in run.cases] == ["aiohttp", "nginx"]


def test_a_run_3_file_is_read_with_no_rounds_and_no_intervals() -> None:
    on_disk = json.loads((DATA / "run_v3" / "run.json").read_text())
    assert on_disk["schema"] == SCHEMA_3
    run = read_run(DATA / "run_v3")
    assert run.schema == SCHEMA
    assert (run.status, run.verdict, run.thresholds) == ("complete", None, ())
    for case, written in zip(run.cases, on_disk["cases"], strict=True):
        assert case.rounds == ()
        assert (case.summary.rounds, case.summary.peak_ci) == (0, None)
        assert case.summary.peak == written["summary"]["peak"]


# -- harness.run/4 → /5: protocol is part of a case -----------------------------------------
def test_a_run_4_file_reads_as_h1_cases_that_negotiated_nothing() -> None:
    on_disk = json.loads((DATA / "run_v4" / "run.json").read_text())
    assert on_disk["schema"] == SCHEMA_4
    run = read_run(DATA / "run_v4")
    assert run.schema == SCHEMA and run.status == "complete"
    assert [(c.framework, c.protocol, c.negotiated) for c in run.cases] == [
        ("aiohttp", "h1", None),
        ("nginx", "h1", None),
    ]
    for case, written in zip(run.cases, on_disk["cases"], strict=True):
        assert case.summary.peak == written["summary"]["peak"]
        assert case.summary.tls_tax is None and case.summary.tls_tax_ci is None
        assert case.identity[-1] == "h1"
        assert case.key == "_".join(case.identity[:-1])  # an h1 key as /4 named its folder
        assert (DATA / "run_v4" / case.key).is_dir()


def test_a_run_4_case_that_names_a_protocol_is_refused_by_name() -> None:
    data = json.loads((DATA / "run_v4" / "run.json").read_text())
    data["cases"][0]["protocol"] = "h2"
    with pytest.raises(ValueError, match=r"harness.run/4 case of 'aiohttp': unknown 'protocol'"):
        run_from_dict(data)


def test_a_tls_case_writes_its_protocol_and_what_it_negotiated_and_reads_back(
    tmp_path: Path,
) -> None:
    negotiated = Negotiated(
        "h1-tls", "TLSv1.3", "TLS_AES_256_GCM_SHA384", "ECDSA P-256", "http/1.1", False
    )
    case = Case(
        "aiohttp", "text", "empty", "wrk", "single", {"mode": "both"}, "ok",
        protocol="h1-tls", negotiated=negotiated,
        summary=Summary(peak=900.0, tls_tax=0.9, tls_tax_ci=(0.85, 0.95)),
    )  # fmt: skip
    run = Run("r1", "2026-12-01T00:00:00Z", None, {}, {}, {}, (case,))
    write_run(run, tmp_path)
    written = json.loads((tmp_path / "run.json").read_text())["cases"][0]
    assert written["protocol"] == "h1-tls"
    assert written["negotiated"] == {
        "protocol": "h1-tls",
        "tls_version": "TLSv1.3",
        "cipher": "TLS_AES_256_GCM_SHA384",
        "key_type": "ECDSA P-256",
        "alpn": "http/1.1",
        "ca_trusted": False,
    }
    assert written["summary"]["tls_tax_ci"] == [0.85, 0.95]
    assert read_run(tmp_path) == run


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"protocol": "h3"}, "protocol 'h3' is not one of h1, h1-tls, h2, h2c"),
        ({"protocol": "h2", "negotiated": Negotiated("h1-tls")}, "a h2 case negotiated h1-tls"),
    ],
)
def test_a_case_protocol_is_validated(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Case("a", "text", "empty", "wrk", "single", {}, "ok", **fields)  # type: ignore[arg-type]


def test_h2c_negotiates_no_tls() -> None:
    with pytest.raises(ValueError, match="a h2c case negotiates no TLS"):
        Negotiated("h2c", tls_version="TLSv1.3")

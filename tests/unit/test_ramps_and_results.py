"""Ramps yield the studies' steps; results validate, round-trip and refuse unknown schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.ramps import (
    ConcurrencyRamp,
    ConnectionRamp,
    ConstantRateRamp,
    RateRamp,
    ramp_from_dict,
    ramp_text,
    ramps_text,
)
from model.results import SCHEMA, Case, Run, Step, Summary, read_run, summary_from_dict, write_run


def test_autobench_vps_ramp_matches_the_study() -> None:
    steps = list(RateRamp(50, 600, 10, calls_per_connection=10, connections_per_step=6000))
    assert len(steps) == 56
    assert steps[0].offered == 500 and steps[-1].offered == 6000
    assert steps[0].unit == "req/s"
    assert steps[0].connections == 6000
    assert steps[0].duration_s == pytest.approx(120.0)  # 6,000 connections at 50/s


def test_concurrency_ramp_of_the_siege_study() -> None:
    levels = [s.offered for s in ConcurrencyRamp(50, 550, 50, duration_s=60)]
    assert levels == [50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 550]


def test_connection_ramp_steps() -> None:
    ramp = ConnectionRamp(1000, 3000, 1000, hold_s=5, mode="stress")
    assert [s.offered for s in ramp] == [1000, 2000, 3000]
    assert all(s.unit == "conns" for s in ramp)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "spiral"}, "ramp kind 'spiral'"),
        ({"kind": "rate", "low": 0, "high": 10, "step": 1}, "0 < low <= high"),
        ({"kind": "concurrency", "start": 1, "stop": 5, "step": 0}, "must be positive"),
        ({"kind": "concurrency", "start": 1, "stop": 5, "step": 1, "speed": 3}, "speed"),
    ],
)
def test_bad_ramps_are_refused_by_name(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ramp_from_dict(data)


def make_step(**overrides: object) -> Step:
    fields: dict[str, object] = {
        "offered": 100,
        "unit": "concurrency",
        "achieved": 9000.5,
        "replies": 90005,
        "errors": {"total": 0},
        "error_rate": 0.0,
        "latency_ms": {
            "avg": 1.0,
            "p50": 0.9,
            "p90": 1.5,
            "p99": 3.0,
            "p99.9": None,
            "p99.99": None,
            "max": 9.0,
        },
    }
    return Step(**{**fields, **overrides})  # type: ignore[arg-type]


def test_run_round_trips_through_json(tmp_path: Path) -> None:
    pinned = {"server": "0", "agent": "1"}
    steps = (make_step(flags=("driver_bound",)),)
    case = Case("aiohttp", "text", "empty", "wrk", "single", pinned, "ok", steps=steps)
    failed = Case("gevent", "text", "empty", "wrk", "single", pinned, "failed", error="verify")
    run = Run(
        "r1", "2026-11-30T00:00:00Z", None, {"cores": 2}, {"python": "3.11"}, {}, (case, failed)
    )
    path = write_run(run, tmp_path)
    assert json.loads(path.read_text())["schema"] == SCHEMA
    assert read_run(tmp_path) == run


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"unit": "rps"}, "step unit 'rps'"),
        ({"error_rate": 1.5}, "error_rate"),
        ({"achieved": float("nan")}, "achieved must be a finite number"),
        ({"errors": {"timeout": 3}}, "'total'"),
        ({"flags": ("sparkly",)}, "unknown step flags"),
        ({"latency_ms": {"avg": 1.0}}, "latency_ms lacks"),
    ],
)
def test_invalid_steps_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_step(**overrides)


def test_failed_case_needs_a_reason() -> None:
    with pytest.raises(ValueError, match="needs an error"):
        Case("a", "text", "empty", "wrk", "single", {}, "failed")


def test_unknown_schema_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"schema": "harness.run/99", "cases": []}))
    with pytest.raises(ValueError, match=r"'harness.run/99' is not readable"):
        read_run(tmp_path)


def test_a_concurrency_ramp_may_list_its_levels() -> None:
    ramp = ramp_from_dict({"kind": "concurrency", "levels": [10, 100, 1000], "duration_s": 2})
    assert [step.offered for step in ramp] == [10, 100, 1000]
    assert ramp_from_dict({"kind": "concurrency", "levels": "1,10"}).levels == (1, 10)


@pytest.mark.parametrize(
    "fields",
    [
        {"levels": [10, 5]},
        {"levels": [0, 5]},
        {"levels": [10, 10]},
        {"levels": [10], "start": 1, "stop": 2, "step": 1},
    ],
)
def test_concurrency_levels_must_rise_and_stand_alone(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="levels"):
        ramp_from_dict({"kind": "concurrency", **fields})


def test_a_connection_ramp_closes_in_order_unless_told_to_drop() -> None:
    assert ConnectionRamp(start=10, target=10, step=1).close == "orderly"
    assert ConnectionRamp(start=10, target=10, step=1, close="drop").close == "drop"
    with pytest.raises(ValueError, match="close 'kill' is not one of orderly, drop"):
        ConnectionRamp(start=10, target=10, step=1, close="kill")  # type: ignore[arg-type]


def test_a_summary_closing_says_how_they_closed_and_its_tick() -> None:
    closing = {"close": "drop", "connections": 10, "open_after": 0, "tick_max_ms": 12.5}
    assert summary_from_dict({"closing": closing}).closing == closing
    with pytest.raises(ValueError, match="closing needs close"):
        Summary(closing={"close": "slammed", "tick_max_ms": 1.0})
    with pytest.raises(ValueError, match="closing needs close"):
        Summary(closing={"close": "drop"})


def test_a_ramp_as_run_reads_in_one_line_with_its_figures() -> None:
    """What `--set ramp.*` made of a profile's ramp: the report and compare's first lines
    say it (the profile's description names its default ramp only)."""
    million = ramp_from_dict(
        {"kind": "connections", "start": 250000, "target": 1000000, "step": 250000,
         "hold_s": 60, "open_rate_per_s": 450, "mode": "stress"}
    )  # fmt: skip
    assert ramp_text(million) == (
        "connections 250,000→1,000,000 step 250,000, opened at 450/s, each step held 60 s, "
        "stress mode, orderly close"
    )
    assert ramp_text(ConcurrencyRamp(levels=(10, 100, 1000), duration_s=2.5)) == (
        "concurrency 10, 100, 1,000, 2.5 s a step"
    )
    assert ramp_text(ConcurrencyRamp(start=10, stop=200, step=10)).startswith(
        "concurrency 10→200 step 10, 10 s"
    )
    assert "connection rate 10→100/s step 10" in ramp_text(RateRamp(low=10, high=100, step=10))
    assert ramp_text(ConstantRateRamp(rates=(1000, 2000), duration_s=5)) == (
        "open-loop rates 1,000, 2,000 req/s, 5 s each"
    )
    # a profile whose WebSocket scenarios take a connection ramp of their own (smoke)
    assert ramps_text(ConcurrencyRamp(levels=(10,)), ConnectionRamp(50, 100, 50)) == (
        "concurrency 10, 10 s a step; WebSocket scenarios: connections 50→100 step 50, "
        "opened at 200/s, each step held 15 s, load mode, orderly close"
    )

"""The runner's pure pieces (harness/run/): case kinds by ramp kind, analysis, summaries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from drivers.base import DriverResult
from harness.connections import ConnectionRampResult
from harness.run import CASE_KINDS, with_baseline_ratios
from harness.run.analysis import is_driver_bound
from harness.run.connection_case import connection_summary, run_connection_case
from harness.run.http_case import run_http_case
from model.ramps import RAMP_KINDS, ConnectionRamp, RampStep
from model.results import LATENCY_KEYS, Case, Step, Summary
from model.step_figures import StepFigures


def test_every_ramp_kind_has_a_case_kind() -> None:
    assert set(CASE_KINDS) == set(RAMP_KINDS)
    assert CASE_KINDS["rate"] is CASE_KINDS["concurrency"] is run_http_case
    assert CASE_KINDS["connections"] is run_connection_case


def case(framework: str, peak: float | None, unit: str = "req/s", **fields: object) -> Case:
    return Case(
        framework,
        "text",
        "empty",
        "wrk",
        str(fields.pop("process_model", "single")),
        {"mode": str(fields.pop("mode", "both"))},
        "ok",
        summary=Summary(peak=peak, peak_unit=unit),
    )


def test_ratios_to_nginx_are_taken_in_the_same_mode_and_roles_are_set() -> None:
    cases = [
        case("nginx", 40_000),
        case("aiohttp", 10_000),
        case("nginx", 20_000, mode="none"),
        case("gevent", 5_000, mode="none"),
        case("tornado", None),
    ]
    roles = {"nginx": "baseline", "aiohttp": "framework"}
    by_name = {
        (c.framework, c.affinity["mode"]): c.summary for c in with_baseline_ratios(cases, roles)
    }
    assert by_name["nginx", "both"].role == "baseline"
    assert by_name["nginx", "both"].ratio_to_nginx == 1.0
    assert by_name["aiohttp", "both"].ratio_to_nginx == 0.25
    assert by_name["gevent", "none"].ratio_to_nginx == 0.25
    assert by_name["gevent", "none"].role == "framework"  # not in roles: a framework
    assert by_name["tornado", "both"].ratio_to_nginx is None  # no peak, no ratio


def test_no_ratio_for_connection_peaks() -> None:
    [_, aiohttp] = with_baseline_ratios(
        [case("nginx", 100, "conns"), case("aiohttp", 100, "conns")], {}
    )
    assert aiohttp.summary.ratio_to_nginx is None


def driver(busy_polls: bool) -> SimpleNamespace:
    return SimpleNamespace(busy_polls=busy_polls)


RESULT = DriverResult(replies=100, duration_s=1.0, errors={}, latency_ms={})
STEP = RampStep(index=0, offered=1000.0, unit="req/s", duration_s=1.0)


def test_driver_bound_by_cpu_for_closed_loop_drivers() -> None:
    def bound(cpu: float | None) -> bool:
        return is_driver_bound(
            driver(False),  # type: ignore[arg-type]
            RESULT,
            STEP,
            agent_cpu_pct=cpu,
            load_cpu_count=2,
            calls_per_connection=1,
        )

    assert bound(180.0) and not bound(179.0) and not bound(None)


def test_driver_bound_by_offered_rate_for_busy_polling_drivers() -> None:
    def bound(rate: float | None) -> bool:
        result = DriverResult(100, 1.0, {}, {}, figures=StepFigures(connection_rate_per_s=rate))
        return is_driver_bound(
            driver(True),  # type: ignore[arg-type]
            result,
            STEP,
            agent_cpu_pct=None,
            load_cpu_count=1,
            calls_per_connection=10,
        )

    assert bound(94.0) and not bound(95.0) and not bound(None)  # asked: 1000 / 10 per s


def held(open_now: int, rss: int, errors_in_step: int = 0) -> Step:
    return Step(
        offered=open_now,
        unit="conns",
        achieved=float(open_now),
        replies=open_now,
        errors={"total": errors_in_step},
        error_rate=0.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        rss_max_bytes=rss,
        figures=StepFigures(open=open_now, errors_in_step=errors_in_step),
    )


def test_connection_summary_peak_memory_and_limits() -> None:
    ramp = ConnectionRamp(start=100, target=400, step=100)
    result = ConnectionRampResult(
        steps=[held(100, 11_000_000), held(200, 12_000_000), held(290, 12_900_000, 5)],
        breaking_point={"connections": 295, "reason": "connections failed", "t": 1.0},
        limits={"server_sockets_max": 300, "agent_processes": 1},
    )
    summary = connection_summary(ramp, result, server_workers=1, baseline_rss_bytes=10_000_000)
    assert summary.peak == 200 and summary.peak_unit == "conns"  # 290 had errors
    assert summary.memory_per_connection_bytes == pytest.approx(10_000, rel=0.01)
    assert summary.baseline_rss_bytes == 10_000_000
    assert summary.breaking_point is not None
    assert "open-file limit" in summary.breaking_point["capped_by"]
    assert result.breaking_point is not None and "capped_by" not in result.breaking_point
    assert summary.limit_note is not None and "400 connections exceed" in summary.limit_note


def test_a_step_no_agent_held_with_the_others_is_named() -> None:
    ramp = ConnectionRamp(start=100, target=300, step=100)
    result = ConnectionRampResult(
        steps=[held(100, 11_000_000), held(300, 13_000_000)],  # 200: never held together
        limits={"server_sockets_max": 19_900, "agent_processes": 2},
    )
    summary = connection_summary(ramp, result, server_workers=1, baseline_rss_bytes=None)
    assert summary.limit_note is not None
    assert summary.limit_note.startswith("200 conns: never held by every agent at once")

"""One HTTP step as a record: built from a driver's result and the monitor's statistics
(`build_step`), a step whose driver gave no result (`failed_step`) and its second attempt
(`retried_step`), the warm-up's step, the names of a step's raw files.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from drivers.base import DriverResult
from harness.run.bottleneck import is_contended
from model.ramps import RampStep
from model.results import LATENCY_KEYS, Step
from model.step_figures import RetriedStep, StepFigures


def database_cpu(stats: dict[str, Any]) -> dict[str, float]:
    """`{"db_cpu_pct": …}` for a step's figures when the database was watched, else {}."""
    return {"db_cpu_pct": stats["db_cpu_pct"]} if stats.get("db_cpu_pct") is not None else {}


def build_step(
    ramp_step: RampStep,
    result: DriverResult,
    stats: dict[str, Any],
    *,
    probe_ms: float | None,
    flags: list[str],
    measured: dict[str, Any],
) -> Step:
    """A driver's result and the monitor's statistics as one recorded step; `measured`
    is what the harness measured around it, by StepFigures field (a wrong name: TypeError)."""
    total = result.errors_total
    attempts = result.replies + total
    errors = {"total": total, **{kind: n for kind, n in result.errors.items() if n}}
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=round(result.rate, 1),
        replies=result.replies,
        errors=errors,
        error_rate=round(total / attempts, 6) if attempts else 0.0,
        latency_ms=rounded_latency(result.latency_ms),
        latency_uncorrected_ms=(
            rounded_latency(result.latency_uncorrected_ms)
            if result.latency_uncorrected_ms is not None
            else None
        ),
        histograms=dict(result.histograms),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        probe_ms=probe_ms,
        flags=tuple(flags),
        figures=dataclasses.replace(
            result.figures, duration_s=round(result.duration_s, 3), **measured
        ),
    )


def rounded_latency(latency_ms: dict[str, float | None]) -> dict[str, float | None]:
    """Every latency key (None where the driver gave none), to the microsecond."""
    return {
        key: (round(value, 3) if value is not None else None)
        for key, value in {**dict.fromkeys(LATENCY_KEYS), **latency_ms}.items()
    }


def failed_step(
    ramp_step: RampStep,
    reason: str,
    stats: dict[str, Any],
    noise: dict[str, Any] | None = None,
) -> Step:
    """A step whose driver produced no result (it aborted: refused, timed out)."""
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=0.0,
        replies=0,
        errors={"total": 1, "aborted": 1},
        error_rate=1.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        flags=("contended",) if noise and is_contended(noise) else (),
        figures=StepFigures(driver_error=reason, **(noise or {}), **database_cpu(stats)),
        bottleneck="unknown",
    )


def step_label(ramp_step: RampStep) -> str:
    """The name of a step's raw files: `step003` (then `-0.txt`, one per driver process)."""
    return f"step{ramp_step.index:03d}"


def is_aborted(step: Step) -> bool:
    """Whether a step's driver produced no result (`failed_step`)."""
    return (
        step.figures.driver_error is not None
        and step.replies == 0
        and step.errors.get("aborted") == 1
    )


def retried_step(again: Step, *, first: Step, label: str) -> Step:
    """The second attempt at a step whose first gave no figures: what it measured, with the
    first attempt's error and raw files named (`figures.retried`); still no figures, it is
    a lost step (`step_lost`), which the case's status and the summary say."""
    retried = RetriedStep(first_error=first.figures.driver_error, first_raw=f"{label}-*.txt")
    flags = set(again.flags)
    if is_aborted(again):
        flags.add("step_lost")
    return dataclasses.replace(
        again,
        flags=tuple(sorted(flags)),
        figures=dataclasses.replace(again.figures, retried=retried),
    )


def warmup_step(first: RampStep, warmup_s: float) -> RampStep:
    """The first step's load for `warmup_s` (not recorded): caches, JITs, pools settle."""
    connections = None
    if first.connections is not None and first.duration_s:
        connections = max(1, round(first.connections * warmup_s / first.duration_s))
    return dataclasses.replace(first, index=-1, duration_s=warmup_s, connections=connections)

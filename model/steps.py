"""A ramp step as recorded: `Step` (its common columns, validated) and what a step's
flags, latency keys and bottlenecks may be. A step's other figures are a typed record,
model.step_figures.StepFigures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from model.step_figures import LATENCY_KEYS, StepFigures, figures_from_dict

STEP_UNITS = ("req/s", "conns", "concurrency")
# percentiles by name (every latency record's keys: LATENCY_KEYS)
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9, "p99.99": 99.99}
# the histograms a step may keep (docs/results.md): same basis as latency_ms, and for
# open-loop drivers the same requests timed from their actual send
HISTOGRAM_NAMES = ("latency", "latency_uncorrected")
FLAG_MEANINGS = {
    "driver_bound": "the load generator limited the step (≥ 90 % of its CPUs, or httperf "
    "short of the rate asked) while the server was not saturated: the step measures the driver",
    "noisy": "repeats of this step spread by more than 10 %",
    "driver_capped": "the driver could not offer the load asked (e.g. httperf's 1,024 sockets)",
    "limit_capped": "an OS limit (open files, ephemeral ports), not the server, capped the step",
    "contended": "other processes used > 10 % of a core on the server's or the load's CPUs",
    "cpu_contended": "the server or the load generator waited >= 10 % of a core for a CPU "
    "another process held: the machine, not only the server, shaped the step",
    "step_lost": "the driver gave no figures for the step twice (it was retried once): the "
    "ramp has a hole there, and its case reads `incomplete`",
    "throttled": "the server's cgroup was held back by its CPU quota (--cpu-quota) in some "
    "of the step's CFS periods: figures.cgroup has the periods and the time",
    "imprecise": "the case's rounds stopped (time budget or max_rounds) before its peak's 95 % "
    "interval was within the precision asked: summary.imprecise_reason says how wide it is",
}
# which side limited a step (harness.run.analysis.step_bottleneck)
BOTTLENECKS = ("server", "load generator", "database", "os limit", "none", "unknown")


def check_finite(name: str, value: float | None) -> None:
    """ValueError naming `name` unless `value` is None or a finite number."""
    if value is not None and (not isinstance(value, int | float) or not math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number, not {value!r}")


@dataclass(frozen=True)
class Step:
    """One ramp step against one framework."""

    offered: float
    unit: str
    achieved: float
    replies: int
    errors: dict[str, int]
    error_rate: float
    latency_ms: dict[str, float | None]
    server_cpu_pct: float | None = None
    agent_cpu_pct: float | None = None
    # open loop: the same requests timed from their actual send (the correction made visible)
    latency_uncorrected_ms: dict[str, float | None] | None = None
    histograms: dict[str, str] = field(default_factory=dict)  # name → base64 HdrHistogram (µs)
    rss_max_bytes: int | None = None
    tick_ms: dict[str, float | None] = field(default_factory=lambda: {"avg": None, "max": None})
    probe_ms: float | None = None
    flags: tuple[str, ...] = ()
    # the step's other figures: the driver's, the harness's around it, a round's...
    figures: StepFigures = field(default_factory=StepFigures)
    bottleneck: str | None = None  # one of BOTTLENECKS; None: not judged (connection ramps)
    # CPU µs per reply over the step: the server's (its cgroup's counter, or its process
    # tree's clocks: summary.cgroup says which) and the load generator's
    cpu_us_per_req: float | None = None
    agent_cpu_us_per_req: float | None = None

    def __post_init__(self) -> None:
        if self.bottleneck is not None and self.bottleneck not in BOTTLENECKS:
            raise ValueError(
                f"step bottleneck {self.bottleneck!r} is not one of {', '.join(BOTTLENECKS)}"
            )
        if self.unit not in STEP_UNITS:
            raise ValueError(f"step unit {self.unit!r} is not one of {', '.join(STEP_UNITS)}")
        for name in (
            "offered",
            "achieved",
            "error_rate",
            "server_cpu_pct",
            "agent_cpu_pct",
            "probe_ms",
            "cpu_us_per_req",
            "agent_cpu_us_per_req",
        ):
            check_finite(name, getattr(self, name))
        if self.offered < 0 or self.achieved < 0 or self.replies < 0:
            raise ValueError(f"offered, achieved and replies must be >= 0 ({self})")
        if "total" not in self.errors:
            raise ValueError(f"errors must have a 'total', not {self.errors}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be within 0..1, not {self.error_rate}")
        missing = set(LATENCY_KEYS) - set(self.latency_ms)
        if missing:
            raise ValueError(f"latency_ms lacks {sorted(missing)}")
        if self.latency_uncorrected_ms is not None:
            missing = set(LATENCY_KEYS) - set(self.latency_uncorrected_ms)
            if missing:
                raise ValueError(f"latency_uncorrected_ms lacks {sorted(missing)}")
        unknown = set(self.histograms) - set(HISTOGRAM_NAMES)
        if unknown:
            raise ValueError(f"unknown histograms {sorted(unknown)}")
        for name, encoded in self.histograms.items():
            if not isinstance(encoded, str) or not encoded:
                raise ValueError(f"histogram {name!r} must be a non-empty base64 string")
        unknown = set(self.flags) - set(FLAG_MEANINGS)
        if unknown:
            raise ValueError(f"unknown step flags {sorted(unknown)}")
        if not isinstance(self.figures, StepFigures):
            raise ValueError(f"figures must be a StepFigures, not {type(self.figures).__name__}")


def step_from_dict(data: dict[str, Any]) -> Step:
    """A Step from its JSON form (harness.run/6: its `figures` an object of StepFigures)."""
    figures = figures_from_dict(data.get("figures") or {})
    return Step(**{**data, "flags": tuple(data.get("flags", ())), "figures": figures})

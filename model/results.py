"""The result model, schema `harness.run/1`: Run → Case → Step, frozen and validated.

Format history (bump SCHEMA on any change; old files stay readable or are refused by name):
- harness.run/1 — first version (DESIGN.md "Result format").
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA = "harness.run/1"
READABLE_SCHEMAS = (SCHEMA,)
CaseStatus = Literal["ok", "failed", "skipped"]
STEP_UNITS = ("req/s", "conns", "concurrency")
LATENCY_KEYS = ("avg", "p50", "p90", "p99", "max")
FLAG_MEANINGS = {
    "driver_bound": "the load generator used ≥ 90 % of its CPUs: the step measures the driver",
    "noisy": "repeats of this step spread by more than 10 %",
    "driver_capped": "the driver could not offer the load asked (e.g. httperf's 1,024 sockets)",
    "limit_capped": "an OS limit (open files, ephemeral ports), not the server, capped the step",
}


def _finite(name: str, value: float | None) -> None:
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
    rss_max_bytes: int | None = None
    tick_ms: dict[str, float | None] = field(default_factory=lambda: {"avg": None, "max": None})
    probe_ms: float | None = None
    flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # driver-specific (MB/s, ...)

    def __post_init__(self) -> None:
        if self.unit not in STEP_UNITS:
            raise ValueError(f"step unit {self.unit!r} is not one of {', '.join(STEP_UNITS)}")
        for name in (
            "offered",
            "achieved",
            "error_rate",
            "server_cpu_pct",
            "agent_cpu_pct",
            "probe_ms",
        ):
            _finite(name, getattr(self, name))
        if self.offered < 0 or self.achieved < 0 or self.replies < 0:
            raise ValueError(f"offered, achieved and replies must be >= 0 ({self})")
        if "total" not in self.errors:
            raise ValueError(f"errors must have a 'total', not {self.errors}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be within 0..1, not {self.error_rate}")
        missing = set(LATENCY_KEYS) - set(self.latency_ms)
        if missing:
            raise ValueError(f"latency_ms lacks {sorted(missing)}")
        unknown = set(self.flags) - set(FLAG_MEANINGS)
        if unknown:
            raise ValueError(f"unknown step flags {sorted(unknown)}")


@dataclass(frozen=True)
class Case:
    """One framework under one scenario, sink, driver, process model and affinity."""

    framework: str
    scenario: str
    sink: str
    driver: str
    process_model: str
    affinity: dict[str, str | None]
    status: CaseStatus
    error: str | None = None
    verify: dict[str, Any] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    reconcile: dict[str, int] | None = None

    def __post_init__(self) -> None:
        if self.status not in ("ok", "failed", "skipped"):
            raise ValueError(f"case status {self.status!r} is not ok, failed or skipped")
        if self.status != "ok" and not self.error:
            raise ValueError(f"a {self.status} case needs an error saying why")

    @property
    def key(self) -> str:
        """A directory-safe name unique within a run."""
        model = self.process_model.replace(":", "-")
        mode = self.affinity.get("mode") or "pinned"
        parts = [self.framework, self.scenario, self.sink, self.driver, model, mode]
        return "_".join(str(p) for p in parts)


@dataclass(frozen=True)
class Run:
    """A whole comparison: host facts and versions that must agree before runs are combined."""

    run_id: str
    started: str
    finished: str | None
    host: dict[str, Any]
    versions: dict[str, Any]
    config: dict[str, Any]
    cases: tuple[Case, ...] = ()
    schema: str = SCHEMA

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise ValueError(f"schema {self.schema!r}: this harness writes {SCHEMA}")
        if not self.run_id:
            raise ValueError("run_id must not be empty")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        return {"schema": data.pop("schema"), **data}


def step_from_dict(data: dict[str, Any]) -> Step:
    return Step(**{**data, "flags": tuple(data.get("flags", ()))})


def case_from_dict(data: dict[str, Any]) -> Case:
    return Case(**{**data, "steps": tuple(step_from_dict(s) for s in data.get("steps", ()))})


def run_from_dict(data: dict[str, Any]) -> Run:
    """A Run from parsed JSON; an unknown schema is refused by name."""
    schema = data.get("schema")
    if schema not in READABLE_SCHEMAS:
        raise ValueError(
            f"result schema {schema!r} is not readable by this harness "
            f"(it reads {', '.join(READABLE_SCHEMAS)})"
        )
    fields = {k: v for k, v in data.items() if k != "cases"}
    return Run(**fields, cases=tuple(case_from_dict(c) for c in data.get("cases", ())))


def write_run(run: Run, directory: Path) -> Path:
    """Write `run.json` atomically (a reader never sees half a file)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "run.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(run.to_dict(), indent=2, sort_keys=False) + "\n")
    partial.replace(path)
    return path


def read_run(path: Path) -> Run:
    """Read `run.json` (or the directory holding it)."""
    if path.is_dir():
        path = path / "run.json"
    return run_from_dict(json.loads(path.read_text()))

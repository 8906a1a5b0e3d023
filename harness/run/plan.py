"""What a run is asked to do: the plan, its id, the default CPUs, and who watches it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from harness import affinity as cpu_affinity
from harness.profile import Profile
from harness.services import new_database_name
from model.results import Case, Step


class Reporter(Protocol):
    """What the runner tells whoever watches (the CLI's progress bars; nothing in tests)."""

    def preparing(self, *, what: str, done: int, total: int) -> None: ...
    def case_started(self, *, label: str, steps: int) -> None: ...
    def step_started(self, *, index: int, offered: float, unit: str) -> None: ...
    def sample(self, *, row: dict[str, Any]) -> None: ...
    def step_finished(self, *, step: Step) -> None: ...
    def case_finished(self, *, case: Case) -> None: ...


class SilentReporter:
    def preparing(self, *, what: str, done: int, total: int) -> None: ...
    def case_started(self, *, label: str, steps: int) -> None: ...
    def step_started(self, *, index: int, offered: float, unit: str) -> None: ...
    def sample(self, *, row: dict[str, Any]) -> None: ...
    def step_finished(self, *, step: Step) -> None: ...
    def case_finished(self, *, case: Case) -> None: ...


@dataclass(frozen=True)
class Plan:
    """A comparison to run: the profile, the frameworks and where load and servers run."""

    profile: Profile
    frameworks: tuple[str, ...]
    server_cpus: str
    agent_cpus: str
    out_dir: Path
    run_id: str
    verify: bool = True
    mongo_url: str | None = None  # a real MongoDB instead of the FerretDB the harness starts
    # the run's own database there (records, GridFS): created by the run, dropped after it
    mongo_db: str = field(default_factory=new_database_name)


def default_cpus() -> tuple[str, str]:
    """Server on the first CPU, load on the rest (both on it on a one-CPU machine)."""
    cpus = sorted(os.sched_getaffinity(0))
    server = [cpus[0]]
    agent = cpus[1:] or cpus[:1]
    return cpu_affinity.format_cpu_list(server), cpu_affinity.format_cpu_list(agent)


def new_run_id(profile_name: str) -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + profile_name


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

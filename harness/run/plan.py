"""What a run is asked to do: the plan, its id, the default CPUs, and who watches it."""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness import affinity as cpu_affinity
from harness.profile import Profile
from harness.secrets import keep_url
from harness.services.ferretdb import new_database_name
from model.errors import UserError
from model.results import Case, Step

if TYPE_CHECKING:
    from harness.fleet.client import FleetAccess


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
    load_cpus: str
    out_dir: Path
    run_id: str
    verify: bool = True
    mongo_url: str | None = None  # a real MongoDB instead of the FerretDB the harness starts
    # the run's own database there (records, GridFS): created by the run, dropped after it
    mongo_db: str = field(default_factory=new_database_name)
    # what the FerretDB the harness starts runs on (harness.services.database.MONGO_BACKENDS)
    mongo_backend: str = "sqlite"
    db_cpus: str | None = None  # CPUs for FerretDB and PostgreSQL (None: not pinned)
    fleet: str | None = None  # --fleet: local:N or tls://SCHEDULER:PORT (None: load from here)
    # how the harness proves itself to a --fleet scheduler (certificate, or --insecure-fleet)
    fleet_access: FleetAccess | None = None
    server_address: str | None = None  # where servers listen for a fleet (None: its default)
    # the user's own certificate for the TLS cases (None: a throwaway CA's, made per run)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # --strict-verify: a deviation the server does not declare fails its case
    # (harness.verify.severity); a profile's strict_verify = true does the same
    strict_verify: bool = False
    # a pod's limits on each server's cgroup (harness.cgroups): --cpu-quota in cores,
    # --memory-max in bytes (None: no limit)
    cpu_quota: float | None = None
    memory_max_bytes: int | None = None
    # --cpu-profile: one more round at each case's peak, its server sampled
    cpu_profile: bool = False
    # what the harness chose for the user, one line each (printed before the run starts)
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        keep_url(self.mongo_url)  # its password is hidden in all the run writes
        if self.cpu_quota is not None and not 0.01 <= self.cpu_quota <= 1024:
            raise UserError(f"--cpu-quota {self.cpu_quota:g} is not a share of cores in 0.01..1024")
        if self.memory_max_bytes is not None and self.memory_max_bytes < 2**20:
            raise UserError(f"--memory-max {self.memory_max_bytes} bytes is under 1 MiB")


def default_cpus() -> tuple[str, str]:
    """Server on the first CPU, load on the rest (both on it on a one-CPU machine)."""
    cpus = sorted(os.sched_getaffinity(0))
    server = [cpus[0]]
    agent = cpus[1:] or cpus[:1]
    return cpu_affinity.format_cpu_list(server), cpu_affinity.format_cpu_list(agent)


def new_run_id(profile_name: str, now: datetime | None = None) -> str:
    """The UTC start to the millisecond, then the profile: `20261130-170804.123-smoke`."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%d-%H%M%S.") + f"{now.microsecond // 1000:03d}-{profile_name}"


def claim_run_dir(results_dir: Path, profile_name: str) -> tuple[str, Path]:
    """A new run id and its directory, created here and by no one else (an exclusive
    mkdir): two runs started in the same millisecond get `…123.2-smoke` and so on, never
    one folder. UserError when the results directory is not writable."""
    stamp = new_run_id(profile_name)
    time_part = stamp[: -len(profile_name) - 1]
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        for attempt in itertools.count(1):
            run_id = stamp if attempt == 1 else f"{time_part}.{attempt}-{profile_name}"
            with contextlib.suppress(FileExistsError):
                (results_dir / run_id).mkdir()
                return run_id, results_dir / run_id
    except OSError as error:
        raise UserError(
            f"results directory {results_dir} is not writable ({error.strerror}): "
            "choose another with --results"
        ) from None
    raise AssertionError("unreachable")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

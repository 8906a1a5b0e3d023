"""What a case kind is given (frozen contexts instead of long argument lists) and what it
gives back (`Measured`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cgroups.groups import Cgroup, CgroupSupport
from harness.profile import Profile
from harness.services.backends import Backends
from harness.services.database import HarnessDatabase
from harness.services.sink_store import SinkStore
from harness.tls import Certificates
from harness.topology import ProcessModel
from model.results import Step, Summary
from model.scenarios import Scenario

if TYPE_CHECKING:
    from harness.cpu_sampler import CpuSampler
    from harness.fleet.client import Fleet
    from harness.monitor import Monitor
    from harness.run.plan import Plan, Reporter
    from harness.topology import Topology


@dataclass(frozen=True)
class RunContext:
    """Fixed for the whole run: the plan, its scenario, the backends, who watches, and the
    database the harness started for the mongo sink and GridFS (None: none needed, or a
    user's MongoDB), the fleet whose hosts drive the load (None: this machine), and the
    certificates of the TLS cases (None: the run has none), and the cgroups the run may
    make (harness.cgroups, found once; None: none looked for) and the database's."""

    plan: Plan
    scenario: Scenario
    reporter: Reporter
    backends: Backends | None = None
    database: HarnessDatabase | None = None
    fleet: Fleet | None = None
    certificates: Certificates | None = None
    cgroups: CgroupSupport | None = None
    # the database's group (its processes moved there once it ran; None: none)
    database_cgroup: Cgroup | None = None
    # --cpu-profile's profiled round: sampling its steps (None: no sampling)
    step_sampler: CpuSampler | None = None

    @property
    def server_host(self) -> str:
        """Where servers listen: loopback, or the address the fleet's hosts reach."""
        return self.fleet.server_address if self.fleet is not None else "127.0.0.1"

    @property
    def profile(self) -> Profile:
        return self.plan.profile


@dataclass(frozen=True)
class CaseContext:
    """One case: which framework, where it and the load run, where its files go."""

    run: RunContext
    framework: str
    mode: str  # affinity mode: both, server, agent or none
    process_model: ProcessModel
    server_cpus: str | None  # None: not pinned
    load_cpus: str | None
    load_cpu_count: int
    case_dir: Path
    store: SinkStore
    protocol: str = "h1"  # what the server speaks (servers.contract.PROTOCOLS)

    @property
    def profile(self) -> Profile:
        return self.run.plan.profile

    @property
    def scenario(self) -> Scenario:
        return self.run.scenario

    @property
    def raw_dir(self) -> Path:
        return self.case_dir / "raw"


@dataclass(frozen=True)
class Measured:
    """What a case kind measured against a running, verified server."""

    steps: tuple[Step, ...]
    summary: Summary
    load_cpus: str | None  # where the load ran, as read from its processes
    error: str | None = None  # set when the case failed part-way (the server died...)
    stored_before: int | None = None  # the sink's records before the counted load
    messages_sent: int | None = None  # WebSocket messages sent (connection ramps)


# a case kind: run the ramp against the server the monitor watches
CaseKind = Callable[[CaseContext, "Topology", "Monitor"], Measured]

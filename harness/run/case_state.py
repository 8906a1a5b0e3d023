"""What a case's phases learn as they run (`CaseState`), and the one place its outcome
becomes the Case that run.json records (`case_record`)."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.run.context import CaseContext, Measured, RunContext
from harness.run.ledger import SinkLedger
from harness.run.pipeline import CaseEnd
from harness.topology import ProcessModel
from model.results import Case, CaseStatus, Negotiated

if TYPE_CHECKING:
    from harness.cgroups.files import CgroupReading
    from harness.cgroups.groups import Cgroup
    from harness.monitor import Monitor
    from harness.topology import Topology
    from harness.verify import Routes


@dataclass(eq=False)
class CaseState:
    """One case as its phases fill it in: what it is (run, framework, affinity mode,
    process model, protocol), what the phases opened (`held`, released when the pipeline
    ends) and what each found."""

    run: RunContext
    framework: str
    mode: str  # affinity mode: both, server, agent or none
    model: ProcessModel
    protocol: str
    repeat: int = 0
    round_label: str | None = None  # a confirmation round's ("round 2 of 5")
    held: ExitStack = field(default_factory=ExitStack)
    affinity: dict[str, str | None] = field(default_factory=dict)
    # prepare: where and with which sink the case runs
    ctx: CaseContext | None = None
    # start: the server's cgroup (None: none, and why), the server, its monitor
    group: Cgroup | None = None
    cgroup_why_not: str | None = None
    server: Topology | None = None
    monitor: Monitor | None = None
    serving: ExitStack = field(default_factory=ExitStack)  # closed by the stop phase
    # probe and verify
    negotiated: Negotiated | None = None
    protocol_check: dict[str, Any] | None = None
    routes: Routes | None = None
    verify: dict[str, Any] = field(default_factory=dict)
    # measure, stop, annotate, reconcile
    measured: Measured | None = None
    final: CgroupReading | None = None  # the server's cgroup's last reading, once stopped
    ledger: SinkLedger | None = None

    def __post_init__(self) -> None:
        if not self.affinity:
            self.affinity = {"mode": self.mode, "server": None, "agent": None}

    @property
    def context(self) -> CaseContext:
        """The case's context (the prepare phase made it)."""
        if self.ctx is None:
            raise RuntimeError(f"{self.framework}: the case was not prepared")
        return self.ctx

    @property
    def topology(self) -> Topology:
        """The running server (the start phase started it)."""
        if self.server is None:
            raise RuntimeError(f"{self.framework}: the server was not started")
        return self.server


def new_case(
    run: RunContext,
    framework: str,
    model: ProcessModel,
    protocol: str,
    status: CaseStatus,
    affinity: dict[str, str | None],
    **fields: Any,
) -> Case:
    """A Case of this run's scenario, sink and driver."""
    profile = run.profile
    return Case(
        framework=framework,
        scenario=profile.scenario,
        sink=profile.sink,
        driver=profile.driver,
        process_model=model.name,
        affinity=affinity,
        status=status,
        protocol=protocol,
        **fields,
    )


def case_record(state: CaseState, end: CaseEnd | None) -> Case:
    """The Case a pipeline's outcome records: `end`'s kind and reason as its status and
    error (None: every phase ran, the case is ok), with what the phases before found —
    the verify entries, what was negotiated, and once measured its steps and summary,
    and the sink's audit."""
    status, error = ("ok", None) if end is None else (end.kind, end.reason)
    fields: dict[str, Any] = {}
    if state.measured is not None:
        summary = state.measured.summary
        if state.ledger is not None:
            fields["reconcile"] = state.ledger.outcome
            summary = dataclasses.replace(summary, sink_store=state.ledger.sink_store)
        fields |= {"steps": state.measured.steps, "summary": summary}
    return new_case(
        state.run,
        state.framework,
        state.model,
        state.protocol,
        status,
        state.affinity,
        error=error,
        verify=state.verify,
        negotiated=state.negotiated,
        **fields,
    )

"""The measure, annotate and reconcile phases (harness.run.pipeline): the ramp run by its
case kind, then what the stopped server's cgroup and telemetry add to the figures, then
the sink audited against what was acknowledged.

The case kind is chosen by the ramp's kind through CASE_KINDS; each is a measure phase
of its own (HTTP steps, which the memcached scenario's driver also speaks; connection
ramps), and the rest of the pipeline is the same for all.
"""

from __future__ import annotations

import dataclasses

from harness.run.attack_case import run_attack_case
from harness.run.bottleneck import oom_reason
from harness.run.case_server import cgroup_record, load_cgroup, load_generators_in
from harness.run.case_state import CaseState
from harness.run.connection_case import run_connection_case
from harness.run.context import CaseKind, Measured
from harness.run.http_case import run_http_case
from harness.run.ledger import audit_sink
from harness.run.pipeline import CaseEnd
from servers import FRAMEWORKS

CASE_KINDS: dict[str, CaseKind] = {
    "rate": run_http_case,
    "concurrency": run_http_case,
    "constant-rate": run_http_case,
    "connections": run_connection_case,
    "h2-attacks": run_attack_case,
}
NO_TELEMETRY_NOTE = (
    "no telemetry line (a server run as a command): tick lag and the server's own "
    "counters are not measured; RSS is its process tree's, CPU its cgroup's (without one, "
    "its process tree's)"
)


def measure(state: CaseState) -> CaseEnd | None:
    """The ramp's case kind against the verified server, the monitor watching the server,
    the run's database and the load generators (in their own cgroup where the run may
    make one). A measurement that fails part-way ends the case once annotated."""
    ctx, run, monitor = state.context, state.run, state.monitor
    assert monitor is not None, "the start phase made the monitor"
    if run.database is not None:  # its CPU beside the server's (db_cpu_pct)
        monitor.set_database_pids(run.database.pids())
        monitor.set_database_cgroup(run.database_cgroup)
    monitor.start(state.topology.pids)
    group = load_cgroup(ctx)
    monitor.set_load_cgroup(group)
    with load_generators_in(group):
        state.measured = CASE_KINDS[ctx.profile.ramp.kind](ctx, state.topology, monitor)
    return None


def annotate(state: CaseState) -> CaseEnd | None:
    """What the stopped server's cgroup adds (its record, the memory peak, the kernel's
    OOM kills: the case's failure, first) and, for a server without telemetry, why its
    figures that need it are empty; where the load ran. A measurement that failed ends
    the case here, with its error."""
    ctx, final = state.context, state.final
    measured = _measured(state)
    state.affinity["agent"] = measured.load_cpus
    record = cgroup_record(ctx, state.group, state.cgroup_why_not, final)
    peak_bytes = final.memory_peak_bytes if final is not None else measured.summary.rss_max_bytes
    summary = dataclasses.replace(measured.summary, cgroup=record, memory_peak_bytes=peak_bytes)
    error = measured.error
    out_of_memory = oom_reason(final.oom_kills if final else 0, record["memory_max_bytes"])
    if out_of_memory is not None:  # the kernel's kill is the case's failure, first
        error = "; ".join(filter(None, (out_of_memory, measured.error)))
    if not FRAMEWORKS[state.framework].telemetry:
        note = "; ".join(filter(None, (summary.limit_note, NO_TELEMETRY_NOTE)))
        summary = dataclasses.replace(summary, limit_note=note)
    state.measured = dataclasses.replace(measured, summary=summary, error=error)
    return CaseEnd("measure", "failed", error) if error else None


def reconcile(state: CaseState) -> CaseEnd | None:
    """The sink audited once the server stopped and flushed: the case fails when records
    were lost, stored twice or torn (harness.run.ledger)."""
    ctx, measured = state.context, _measured(state)
    state.ledger = audit_sink(
        measured.steps,
        ctx.scenario,
        ctx.store,
        stored_before=measured.stored_before,
        messages_sent=measured.messages_sent,
        keep_dir=ctx.case_dir,
    )
    if state.ledger is not None and state.ledger.error is not None:
        return CaseEnd("reconcile", "failed", state.ledger.error)
    return None


def _measured(state: CaseState) -> Measured:
    if state.measured is None:
        raise RuntimeError(f"{state.framework}: the case was not measured")
    return state.measured

"""Connection ramps (WebSocket scenarios): agents hold connections across every step.

The ramp's mechanics (agent processes, per-second readings, the breaking point) are in
harness.connections; this module makes a case of it: the idle server's RSS first, then
the ramp, then the summary (peak connections held, memory per connection, limits).
"""

from __future__ import annotations

import dataclasses
import time

from drivers.base import DriverOutputError
from drivers.processes import how_it_ended
from harness.connections import (
    ConnectionRampResult,
    LocalAgents,
    cgroup_kb_per_connection,
    memory_breakdown,
    memory_per_connection,
    run_connection_ramp,
)
from harness.fleet.agents import FleetAgents
from harness.monitor import Monitor
from harness.run.context import CaseContext, Measured
from harness.run.ledger import count_before_load
from harness.run.peak import summarize
from harness.topology import Topology
from model.figures import figure
from model.ramps import ConnectionRamp
from model.results import Summary

IDLE_READING_S = 1.5  # one idle monitor row: the server's RSS before any connection
SOCKETS_CAPPED_SHARE = 0.98  # a break this close to the sockets limit is the limit's


def run_connection_case(ctx: CaseContext, server: Topology, monitor: Monitor) -> Measured:
    """The whole connection ramp with agent processes; one Step per held target."""
    ramp = ctx.profile.ramp
    assert isinstance(ramp, ConnectionRamp), ramp  # chosen by kind: "connections"
    stored_before = count_before_load(ctx.store)
    time.sleep(IDLE_READING_S)
    idle_row = dict(monitor.rows[-1]) if monitor.rows else None
    baseline_rss = idle_row["server_rss_bytes"] if idle_row else None
    idle_group = monitor.read_server_cgroup()  # the idle server's cgroup memory
    reporter = ctx.run.reporter
    fleet = ctx.run.fleet
    try:
        agents = (
            LocalAgents.for_ramp(
                ramp, ctx.scenario, server, ctx.load_cpus, ctx.raw_dir, server.workers
            )
            if fleet is None
            else FleetAgents(
                fleet, ramp, ctx.scenario, server, ctx.load_cpus, ctx.raw_dir, server.workers
            )
        )
    except DriverOutputError as error:  # a fleet's hosts did not all start
        return Measured((), Summary(), None, error=str(error), stored_before=stored_before)
    result = run_connection_ramp(
        ramp=ramp,
        agents=agents,
        server=server,
        monitor=monitor,
        baseline_rss_bytes=baseline_rss,
        on_step=lambda index, offered: reporter.step_started(
            index=index, offered=offered, unit="conns"
        ),
        on_step_done=lambda step: reporter.step_finished(step=step),
    )
    steps = tuple(result.steps)
    summary = connection_summary(ramp, result, server.workers, baseline_rss)
    summary = dataclasses.replace(
        summary,
        memory_per_connection_kb=cgroup_kb_per_connection(
            list(steps), idle_group.memory_bytes if idle_group is not None else None
        ),
        memory_breakdown=memory_breakdown(list(steps), idle_row),
    )
    error = None
    if result.lost is not None:
        open_now = steps[-1].figures.open if steps else 0
        error = f"{result.lost} at {open_now} connections"
    elif result.server_exit is not None:
        exited = f"server {how_it_ended(result.server_exit)}"
        error = (
            f"{exited} at {steps[-1].figures.open if steps else 0} connections: "
            f"{server.stderr_tail()}"
        )
    elif not steps and result.memory_stop is not None:
        error = (
            "no step held: the host ran short of memory at"
            f" {result.memory_stop['connections']:,} connections"
            f" ({(result.breaking_point or {}).get('reason')})"
        )
        summary = Summary(breaking_point=result.breaking_point)
    elif not steps:
        error = "the agents held no step: see raw/agent-*.txt"
        summary = Summary()
    if result.watchdog_note:  # the watchdogs stopped the agents: said, never silent
        summary = dataclasses.replace(
            summary,
            limit_note="; ".join(filter(None, (summary.limit_note, result.watchdog_note))),
        )
    return Measured(
        steps,
        summary,
        ctx.load_cpus,
        error=error,
        stored_before=stored_before,
        messages_sent=result.messages_sent,
    )


def connection_summary(
    ramp: ConnectionRamp,
    result: ConnectionRampResult,
    server_workers: int,
    baseline_rss_bytes: int | None,
) -> Summary:
    """The peak (the connections held at the highest error-free step, and that step's
    target), where the server broke and what capped it."""
    steps = tuple(result.steps)
    breaking = result.breaking_point
    sockets_max = result.limits["server_sockets_max"]
    if breaking and breaking["connections"] >= SOCKETS_CAPPED_SHARE * sockets_max:
        breaking = {
            **breaking,
            "capped_by": "the server processes' open-file limit, not the server: "
            "use --process-model workers:N",
        }
    notes = []
    if ramp.target > sockets_max:
        notes.append(
            f"{ramp.target} connections exceed what {server_workers} server process(es) may "
            f"open ({sockets_max}): use --process-model workers:N"
        )
    # agents (a fleet's hosts above all) drift apart while opening: a step none held at the
    # same time as the others is missing, and said so
    held = {step.offered for step in steps}
    last = max(held, default=0)
    skipped = [step.offered for step in ramp if step.offered not in held and step.offered < last]
    if skipped:
        notes.append(
            f"{', '.join(figure(t) for t in skipped)} conns: never held by every agent at "
            f"once (they drifted apart while opening): lengthen ramp.hold_s"
        )
    limit_note = "; ".join(notes) or None
    return dataclasses.replace(
        summarize(steps),  # the peak and its load from one step (connection_peak_step)
        breaking_point=breaking,
        memory_per_connection_bytes=memory_per_connection(list(steps), baseline_rss_bytes),
        baseline_rss_bytes=baseline_rss_bytes,
        limits=result.limits,
        limit_note=limit_note,
        closing=result.closing,
    )

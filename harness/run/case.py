"""One case: a framework started, verified, measured by its ramp's case kind, stopped.

Never raises for the framework's faults: a missing framework is `skipped`, a server that
will not start or fails verify is `failed` with the reason. The case kind is chosen by
the ramp's kind through CASE_KINDS.
"""

from __future__ import annotations

import os
from typing import Any

from harness import affinity as cpu_affinity
from harness.monitor import Monitor
from harness.run.connection_case import run_connection_case
from harness.run.context import CaseContext, CaseKind, Measured, RunContext
from harness.run.http_case import run_http_case
from harness.run.ledger import reconcile
from harness.sink_store import SinkStore
from harness.topology import ProcessModel, start_topology
from harness.verify import check_text_route, checks_for, run_checks
from model.errors import UserError
from model.results import Case, CaseStatus
from servers import FRAMEWORKS

CASE_KINDS: dict[str, CaseKind] = {
    "rate": run_http_case,
    "concurrency": run_http_case,
    "connections": run_connection_case,
}
INTERRUPTED_STOP_S = 2.0


def new_case(
    run: RunContext,
    framework: str,
    model: ProcessModel,
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
        **fields,
    )


def run_case(
    run: RunContext,
    framework: str,
    mode: str,
    repeat: int,
    model: ProcessModel,
    round_label: str | None = None,
) -> Case:
    """One framework through the whole ramp under one affinity mode and process model.

    `round_label` ("round 2 of 5") marks a confirmation round (harness.run.rounds): its
    files go to a directory of their own beside the ramp's.
    """
    profile = run.profile
    label = f"{framework} [{mode}]" + (f" #{repeat + 1}" if profile.repeat > 1 else "")
    if len(profile.process_models) > 1:
        label += f" {model.name}"
    if round_label is not None:
        label += f" {round_label}"
    run.reporter.case_started(label=label, steps=len(list(profile.ramp)))
    unpinned: dict[str, str | None] = {"mode": mode, "server": None, "agent": None}
    info = FRAMEWORKS[framework]
    missing = info.missing()
    if missing:
        return new_case(
            run, framework, model, "skipped", unpinned, error=f"not installed: {', '.join(missing)}"
        )
    if not info.serves(run.scenario.route):
        error = f"not supported: {framework} does not serve {run.scenario.route}"
        return new_case(run, framework, model, "skipped", unpinned, error=error)
    if profile.sink not in info.sinks:
        error = f"not supported: {framework} has no {profile.sink} sink"
        return new_case(run, framework, model, "skipped", unpinned, error=error)
    server_cpus = run.plan.server_cpus if mode in ("both", "server") else None
    agent_cpus = run.plan.agent_cpus if mode in ("both", "agent") else None
    agent_count = (
        len(cpu_affinity.parse_cpu_list(agent_cpus)) if agent_cpus else (os.cpu_count() or 1)
    )
    name = new_case(run, framework, model, "ok", unpinned).key + (
        f"_r{repeat + 1}" if profile.repeat > 1 else ""
    )
    if round_label is not None:
        name += "_" + round_label.replace(" ", "-")
    # GridFS and the mongo sink share one database when both are asked for
    mongo_url = run.plan.mongo_url or (run.backends.mongo_url if run.backends else None)
    try:
        store = SinkStore(
            profile.sink,
            mongo_url=mongo_url,
            mongo_w=profile.mongo_w,
            mongo_db=run.plan.mongo_db,
            durable=profile.durable,
        )
    except UserError as error:
        return new_case(run, framework, model, "failed", unpinned, error=str(error))
    with store:
        ctx = CaseContext(
            run=run,
            framework=framework,
            mode=mode,
            process_model=model,
            server_cpus=server_cpus,
            agent_cpus=agent_cpus,
            agent_cpu_count=agent_count,
            case_dir=run.plan.out_dir / name,
            store=store,
        )
        return _run_with_sink(ctx)


def _run_with_sink(ctx: CaseContext) -> Case:
    """Start, verify, measure with the ramp's case kind, stop; then reconcile the sink."""
    run, framework, profile = ctx.run, ctx.framework, ctx.profile
    affinity: dict[str, str | None] = {"mode": ctx.mode, "server": None, "agent": None}
    sink_args = ctx.store.server_args()
    backend_args = run.backends.server_args(sink_args) if run.backends else []
    try:
        server = start_topology(
            framework,
            ctx.process_model,
            sink=profile.sink,
            # a loop choice applies where the framework offers it (aiohttp, tornado)
            loop=profile.loop if profile.loop in FRAMEWORKS[framework].loops else None,
            server_cpus=ctx.server_cpus,
            extra_args=[*sink_args, *backend_args],
            host=run.server_host,
        )
    except UserError as error:
        return new_case(run, framework, ctx.process_model, "failed", affinity, error=str(error))
    interrupted = False
    monitor: Monitor | None = None
    try:  # from the moment the server runs: whatever happens, it is stopped below
        monitor = Monitor(
            server.latest_telemetry, on_sample=lambda row: run.reporter.sample(row=row)
        )
        affinity["server"] = cpu_affinity.cpus_allowed(server.pid)
        verify: dict[str, Any] = {}
        if run.plan.verify:
            # the contract on the (first) instance itself; behind a balancer, also that
            # the balancer passes GET / through (per-instance counters and proxied
            # WebSocket closes are not the contract's to judge through nginx)
            checks = run_checks(server.instance_url, checks_for(framework))
            if server.balancer is not None:
                checks += run_checks(server.url, {"balancer": check_text_route})
            verify = {c.name: {"ok": c.ok, "detail": c.detail} for c in checks}
            if any(not c.ok for c in checks):
                details = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
                error = f"verify failed: {details}"
                model = ctx.process_model
                return new_case(
                    run, framework, model, "failed", affinity, error=error, verify=verify
                )
        monitor.start(server.pids)
        measured: Measured = CASE_KINDS[profile.ramp.kind](ctx, server, monitor)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            if monitor is not None:
                monitor.stop()
                monitor.write_csv(ctx.case_dir / "monitor.csv")
        finally:  # a failed monitor.csv must not leave the server running
            if interrupted:
                server.stop(INTERRUPTED_STOP_S)
            else:
                server.stop()
    affinity["agent"] = measured.agent_cpus
    case = new_case(
        run,
        framework,
        ctx.process_model,
        "failed" if measured.error else "ok",
        affinity,
        error=measured.error,
        verify=verify,
        steps=measured.steps,
        summary=measured.summary,
    )
    return reconcile(
        case,
        ctx.scenario,
        ctx.store,
        stored_before=measured.stored_before,
        messages_sent=measured.messages_sent,
        keep_dir=ctx.case_dir,
    )

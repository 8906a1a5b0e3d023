"""The prepare phase: whether the framework can run this case at all, then the case's
folder, CPUs and sink store (harness.run.pipeline).

A missing framework is `skipped: not installed`; a protocol, route, sink or process model
it cannot carry is `skipped: not supported: <why>`, never run another way; a sink store
that cannot be opened fails the case.
"""

from __future__ import annotations

import os

from harness import affinity as cpu_affinity
from harness.run.case_state import CaseState, new_case
from harness.run.context import CaseContext, RunContext
from harness.run.outputs import case_folder
from harness.run.pipeline import CaseEnd
from harness.server_process import command_unsupported, protocol_unsupported
from harness.services.sink_store import SinkStore
from harness.topology import ProcessModel, topology_unsupported
from model.errors import UserError
from servers import FRAMEWORKS


def unsupported_reason(
    run: RunContext, framework: str, model: ProcessModel, protocol: str
) -> str | None:
    """Why `framework` cannot run this case (a `skipped` case's error), or None."""
    profile, scenario = run.profile, run.scenario
    info = FRAMEWORKS[framework]
    missing = info.missing()
    if missing:
        return f"not installed: {', '.join(missing)}"
    why_not = protocol_unsupported(info, protocol) or topology_unsupported(model, protocol)
    if why_not is not None:
        return f"not supported: {why_not}"
    if not info.serves(scenario.route):
        error = f"not supported: {framework} does not serve {scenario.route}"
        if scenario.route in info.route_notes:  # why, when the registry says
            error += f" ({info.route_notes[scenario.route]})"
        return error
    if profile.sink not in info.sinks:
        return f"not supported: {framework} has no {profile.sink} sink"
    if info.kind == "command":
        why = command_unsupported(info, sink=profile.sink, workers=model.workers)
        if scenario.protocol == "memcached":
            why = "the memcached socket service is python -m servers' own"
        if why is not None:
            return f"not supported: {why}"
    return None


def open_sink_store(run: RunContext) -> SinkStore:
    """The case's sink store (GridFS and the mongo sink share the run's database when both
    are asked for); a UserError when it cannot be opened."""
    profile = run.profile
    return SinkStore(
        profile.sink,
        mongo_url=run.plan.mongo_url,
        database=run.database,
        mongo_w=profile.mongo_w,
        mongo_batch=profile.mongo_batch,
        mongo_db=run.plan.mongo_db,
        durable=profile.durable,
    )


def prepare(state: CaseState) -> CaseEnd | None:
    """The case's context (its CPUs, folder and sink store, entered on `held`), or why the
    framework cannot run it."""
    run, framework, model, protocol = state.run, state.framework, state.model, state.protocol
    why_not = unsupported_reason(run, framework, model, protocol)
    if why_not is not None:
        return CaseEnd("prepare", "skipped", why_not)
    profile, mode = run.profile, state.mode
    server_cpus = run.plan.server_cpus if mode in ("both", "server") else None
    load_cpus = run.plan.load_cpus if mode in ("both", "agent") else None
    load_count = len(cpu_affinity.parse_cpu_list(load_cpus)) if load_cpus else (os.cpu_count() or 1)
    case_dir = case_folder(
        run.plan.out_dir,
        new_case(run, framework, model, protocol, "ok", state.affinity).key,
        repeat=state.repeat,
        repeats=profile.repeat,
        round_label=state.round_label,
    )
    try:
        store = open_sink_store(run)
    except UserError as error:
        return CaseEnd("prepare", "failed", str(error))
    state.held.enter_context(store)
    state.ctx = CaseContext(
        run=run,
        framework=framework,
        mode=mode,
        process_model=model,
        server_cpus=server_cpus,
        load_cpus=load_cpus,
        load_cpu_count=load_count,
        case_dir=case_dir,
        store=store,
        protocol=protocol,
    )
    return None

"""The start and stop phases: the server started in its own cgroup (where the run may make
one) with its monitor, and stopped on every path once it runs (harness.run.pipeline); the
load generators' cgroup; what the case records of the server's cgroup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from drivers.processes import set_load_cgroup_procs
from harness import affinity as cpu_affinity
from harness.cgroups.files import CgroupReading
from harness.cgroups.groups import Cgroup
from harness.cpu_sampler import sampled_server_environment
from harness.monitor import Monitor
from harness.run.case_state import CaseState
from harness.run.context import CaseContext
from harness.run.pipeline import CaseEnd
from harness.topology import start_topology
from model.errors import UserError
from servers import FRAMEWORKS

INTERRUPTED_STOP_S = 2.0
NO_CGROUP_MEMORY = "not measured (no cgroup): memory_peak_bytes is the process tree's RSS"


def server_cgroup(ctx: CaseContext) -> tuple[Cgroup | None, str | None]:
    """The case's server's own cgroup, pinned to its CPUs (cpuset) and capped by the run's
    --cpu-quota and --memory-max; (None, why) where the run may make none."""
    support = ctx.run.cgroups
    if support is None or not support.usable:
        return None, support.reason if support is not None else "not looked for"
    plan = ctx.run.plan
    try:
        group = Cgroup.create(
            support,
            "server",
            cpus=ctx.server_cpus,
            cpu_quota=plan.cpu_quota,
            memory_max_bytes=plan.memory_max_bytes,
        )
    except OSError as error:
        return None, f"the server's cgroup could not be made: {error}"
    return group, None


def load_cgroup(ctx: CaseContext) -> Cgroup | None:
    """The case's load generators' own cgroup, on the load's CPUs (None: the run may make
    none, or it runs on a fleet's hosts): their CPU per step is read there."""
    support = ctx.run.cgroups
    if support is None or not support.usable or ctx.run.fleet:
        return None
    try:
        return Cgroup.create(support, "load", cpus=ctx.load_cpus)
    except OSError:  # the load's CPU is then what the harness reaped (figures.agent_cpu_from)
        return None


@contextlib.contextmanager
def load_generators_in(group: Cgroup | None) -> Iterator[None]:
    """While the block runs, every load generator started joins `group`; it is removed
    after (what is still in it killed first)."""
    set_load_cgroup_procs(group.procs_files if group is not None else ())
    try:
        yield
    finally:
        set_load_cgroup_procs(())
        if group is not None:
            group.remove()


def cgroup_record(
    ctx: CaseContext,
    group: Cgroup | None,
    why_not: str | None,
    final: CgroupReading | None,
) -> dict[str, Any]:
    """What the case records of its server's cgroup (summary.cgroup): mode and why,
    pinning, limits and, from its last reading, throttling and OOM kills."""
    if group is None or final is None:
        return {
            "mode": "none",
            "reason": why_not or "the server's cgroup could not be read",
            "pinning": "taskset" if ctx.server_cpus is not None else None,
            "cpu_quota": None,
            "memory_max_bytes": None,
            "socket_memory": NO_CGROUP_MEMORY,
        }
    record: dict[str, Any] = group.describe()
    if ctx.process_model.balanced and ctx.server_cpus is not None:
        record["pinning"] = "cpuset (taskset per instance)"
    return {
        **record,
        "throttled_periods": final.throttled_periods,
        "periods": final.periods,
        "throttled_s": round(final.throttled_s, 6),
        "oom_kills": final.oom_kills,
    }


def start(state: CaseState) -> CaseEnd | None:
    """The server started (in its cgroup, removed when the case ends) and watched by its
    monitor; from the moment it runs, it is stopped whatever happens (`stop_server`)."""
    ctx, run, framework = state.context, state.run, state.framework
    profile = run.profile
    sink_args = ctx.store.server_args()
    backend_args = run.backends.server_args(sink_args) if run.backends else []
    state.group, state.cgroup_why_not = server_cgroup(ctx)
    if state.group is not None:
        state.held.callback(state.group.remove)
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
            protocol=ctx.protocol,
            certificates=run.certificates,
            cgroup=state.group,
            # a profiled round's server names its JIT's frames for the sampler
            environment=sampled_server_environment() if run.step_sampler else None,
        )
    except UserError as error:
        return CaseEnd("start", "failed", str(error))
    state.server = server
    state.held.enter_context(state.serving)
    state.serving.push(lambda *exc: stop_server(state, *exc))
    state.monitor = Monitor(
        server.latest_telemetry, on_sample=lambda row: run.reporter.sample(row=row)
    )
    if state.group is not None:  # each process joined before it exec'd (drivers.processes)
        outside = sorted(set(server.pids) - state.group.pids())
        if outside:
            state.cgroup_why_not = f"pids {outside} of the server did not join its cgroup"
            state.group = None
        state.monitor.set_server_cgroup(state.group)
    state.affinity["server"] = cpu_affinity.cpus_allowed(server.pid)
    return None


def stop_server(
    state: CaseState,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> bool:
    """The monitor stopped and its rows written, then the server stopped (at once when the
    run is interrupted), then the cgroup's last reading (its memory peak and OOM kills
    outlive the processes). Never swallows the exception it is called with."""
    monitor, server = state.monitor, state.topology
    interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
    try:
        if monitor is not None:
            monitor.stop()
            monitor.write_csv(state.context.case_dir / "monitor.csv")
    finally:  # a failed monitor.csv must not leave the server running
        if interrupted:
            server.stop(INTERRUPTED_STOP_S)
        else:
            server.stop()
        if monitor is not None:
            state.final = monitor.read_server_cgroup()
    return False


def stop(state: CaseState) -> CaseEnd | None:
    """The stop phase: what `start` registered runs now (on an earlier end, or an
    exception, it runs as the pipeline ends)."""
    state.serving.close()
    return None

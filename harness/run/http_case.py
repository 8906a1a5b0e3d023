"""HTTP steps (rate and concurrency ramps): the driver restarts for each step.

Warm up at the first step's load (not recorded), count the sink, then for each step run
the driver with the monitor and the probe watching; a server that exits fails the case
with the steps it finished.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from drivers import build_driver
from drivers.base import Driver, DriverOptions, DriverOutputError, DriverResult, Target, run_step
from harness import affinity as cpu_affinity
from harness.cpu_sampler import sampling
from harness.fleet.steps import HostLost, run_fleet_step, split_evenly
from harness.monitor import Monitor, StepWindow, replies_per_second, step_stats
from harness.probe import Probe
from harness.run.analysis import (
    behind_schedule,
    cpu_contended,
    cpu_us_per_req,
    database_bound_note,
    is_contended,
    is_driver_bound,
    reaped_cpu_s,
    step_bottleneck,
    step_holds,
    step_noise,
    summarize,
    throttled,
)
from harness.run.context import CaseContext, Measured
from harness.run.delay import delay_ms_of, held_in_flight
from harness.run.ledger import count_before_load
from harness.topology import Topology
from model.ramps import ConstantRateRamp, Ramp, RampStep
from model.results import LATENCY_KEYS, Step
from model.step_figures import CgroupCounters, RetriedStep, StepFigures, Throttling

if TYPE_CHECKING:
    from harness.fleet.client import Fleet
    from harness.profile import Profile


def calls_per_connection(ramp: Ramp) -> int:
    """Requests per connection: a rate ramp's setting; one for the others."""
    return ramp.calls_per_connection if ramp.kind == "rate" else 1  # type: ignore[union-attr]


def request_timeout_s(ramp: Ramp, profile_timeout_s: float) -> float:
    """A rate ramp carries its own timeout (autobench's); the others use the profile's."""
    return ramp.timeout_s if ramp.kind == "rate" else profile_timeout_s  # type: ignore[union-attr]


def saturated(ramp: Ramp, step: Step) -> bool:
    """A constant-rate ramp run to saturation ends after this step (it did not hold)."""
    if ramp.kind != "constant-rate" or not ramp.stop_when_saturated:  # type: ignore[union-attr]
        return False
    return not step_holds(step, ramp.saturation_p99_ms)  # type: ignore[union-attr]


def server_exit(server: Topology) -> str | None:
    """Why the server (any of its instances, or their balancer) is gone; None while it runs."""
    return server.process.exit_reason()


# Runs one step's load: (step, label, on_start, abort, on_end) -> the merged result;
# on_end is called when the load has ended, before its output is parsed (if at all)
StepRunner = Callable[
    [
        RampStep,
        str,
        Callable[[list[int]], None] | None,
        Callable[[], str | None] | None,
        Callable[[], None] | None,
    ],
    DriverResult,
]


def local_runner(ctx: CaseContext, driver: Driver, target: Target) -> StepRunner:
    """The step's driver processes on this machine, on the load CPUs."""

    def run(
        step: RampStep,
        label: str,
        on_start: Callable[[list[int]], None] | None,
        abort: Callable[[], str | None] | None,
        on_end: Callable[[], None] | None = None,
    ) -> DriverResult:
        return run_step(
            driver, step, target, ctx.load_cpus, ctx.raw_dir, label, on_start, abort, on_end
        )

    return run


def driver_options(profile: Profile) -> DriverOptions:
    """What the profile tells its driver beyond the ramp (drivers.base.DriverOptions)."""
    return {
        "requests_per_step": profile.requests_per_step,
        "multiplexed_connections": profile.multiplexed_connections,
        "tls_resumption": profile.tls_resumption,
    }


def fleet_runner(ctx: CaseContext, fleet: Fleet, target: Target) -> StepRunner:
    """The step split over the fleet's hosts, each driver sized for its host: a namespace
    host shares this machine's load CPUs with the others (and is pinned to them), a real
    machine uses all its cores."""
    profile = ctx.profile
    load_cpus = {
        host.name: max(1, ctx.load_cpu_count // len(fleet.hosts))
        if fleet.local
        else int(host.facts["cores"])
        for host in fleet.hosts
    }
    # what a driver is made with for the whole step, split as the step's load is: ab's
    # request count, and the connections oha keeps open for a constant-rate ramp
    names = [host.name for host in fleet.hosts]
    requests = split_evenly(profile.requests_per_step or 0, len(names))
    ramp = profile.ramp
    oha_connections = ramp.connections if isinstance(ramp, ConstantRateRamp) else 0
    opened = split_evenly(oha_connections, len(names))
    drivers = {}
    for name, host_requests, host_opened in zip(names, requests, opened, strict=True):
        options: DriverOptions = {
            **driver_options(profile),
            "requests_per_step": max(1, host_requests) if profile.requests_per_step else None,
        }
        host_ramp = ramp
        if isinstance(ramp, ConstantRateRamp):
            host_ramp = dataclasses.replace(ramp, connections=max(1, host_opened))
        drivers[name] = build_driver(profile.driver, host_ramp, load_cpus[name], options)
    cpus = ctx.load_cpus if fleet.local else None

    def run(
        step: RampStep,
        label: str,
        on_start: Callable[[list[int]], None] | None,
        abort: Callable[[], str | None] | None,
        on_end: Callable[[], None] | None = None,  # the hosts parse: the window ends after
    ) -> DriverResult:
        return run_fleet_step(
            fleet, drivers, load_cpus, step, target, cpus, ctx.raw_dir, label, abort
        )

    return run


def run_http_case(ctx: CaseContext, server: Topology, monitor: Monitor) -> Measured:
    """Every step of the profile's ramp against the server, one driver run per step (on
    this machine, or split over the fleet's hosts)."""
    profile, scenario, backends = ctx.profile, ctx.scenario, ctx.run.backends
    steps = list(profile.ramp)
    driver = build_driver(
        profile.driver,
        profile.ramp,
        ctx.load_cpu_count,
        driver_options(profile),
    )
    target = Target(
        server.host,
        server.mc_port() if scenario.protocol == "memcached" else server.port,
        scenario,
        request_timeout_s(profile.ramp, profile.timeout_s),
        paths=backends.paths(scenario) if backends else (),
        expected_body=backends.expected_body(scenario) if backends else None,
        protocol=ctx.protocol,
        # the run's CA (a user's own certificate: None, the system's trust)
        ca_path=ctx.run.certificates.ca_path if ctx.run.certificates else None,
    )
    # where the load ran, read once from the first driver process
    seen: dict[str, str | None] = {"agent": None}

    def note_agent(pids: list[int]) -> None:
        monitor.set_agent_pids(pids)
        if seen["agent"] is None and pids:
            time.sleep(0.05)  # taskset has exec'd the driver by now
            seen["agent"] = cpu_affinity.cpus_allowed(pids[0])

    fleet = ctx.run.fleet
    runner = (
        local_runner(ctx, driver, target) if fleet is None else fleet_runner(ctx, fleet, target)
    )
    if profile.warmup_s > 0:
        warm = warmup_step(steps[0], profile.warmup_s)
        try:
            runner(warm, "warmup", None, None)
        except HostLost as lost:  # the fleet is short of a host before the first step
            return Measured((), summarize([]), None, error=f"{lost} during the warm-up")
        except DriverOutputError:  # a failed warm-up says nothing the steps will not say
            pass
    stored_before = count_before_load(ctx.store)  # what warm-up and verify stored is not counted
    recorded: list[Step] = []
    for ramp_step in steps:
        with sampling(ctx.run.step_sampler, lambda: server.pids):
            step, lost = _run_one_step(ctx, driver, runner, ramp_step, server, monitor, note_agent)
        if lost is None and is_aborted(step) and server_exit(server) is None:
            # no figures, the server alive: the driver failed (siege's end-of-run hang
            # killed past its grace); once more, both attempts' raw output kept
            again, lost = _run_one_step(
                ctx, driver, runner, ramp_step, server, monitor, note_agent, attempt="retry"
            )
            step = retried_step(again, first=step, label=step_label(ramp_step))
        recorded.append(step)
        ctx.run.reporter.step_finished(step=recorded[-1])
        if lost is not None:  # the load from here on would not be the load asked for
            return Measured(
                tuple(recorded),
                summarize(recorded),
                seen["agent"],
                error=f"{lost} during step {ramp_step.index}",
                stored_before=stored_before,
            )
        exited = server_exit(server)
        if exited is not None:
            return Measured(
                tuple(recorded),
                summarize(recorded),
                seen["agent"],
                error=f"{exited} during step {ramp_step.index}: {server.stderr_tail()}",
                stored_before=stored_before,
            )
        if saturated(profile.ramp, recorded[-1]):
            break  # a ramp to saturation: the next, higher rates would only queue up
        if profile.cooldown_s:
            time.sleep(profile.cooldown_s)
    summary = dataclasses.replace(summarize(recorded), topology=server.describe())
    delay_ms = delay_ms_of(scenario.path)
    if delay_ms is not None:  # the delay scenario: how many requests it holds in flight
        summary = dataclasses.replace(summary, held_in_flight=held_in_flight(recorded, delay_ms))
    notes = [backends.limit_note() if backends else None, _database_note(ctx, recorded)]
    if backends is not None:
        summary = dataclasses.replace(summary, backends=backends.describe())
    notes = [summary.limit_note, *notes]
    if any(notes):
        summary = dataclasses.replace(summary, limit_note="; ".join(n for n in notes if n))
    return Measured(tuple(recorded), summary, seen["agent"], stored_before=stored_before)


def _database_note(ctx: CaseContext, steps: list[Step]) -> str | None:
    """Whether the run's database, not the server, bounded a step (analysis)."""
    database = ctx.run.database
    if database is None:
        return None
    server_cpus = (
        len(cpu_affinity.parse_cpu_list(ctx.server_cpus)) if ctx.server_cpus else os.cpu_count()
    )
    return database_bound_note(
        steps,
        server_cores=min(ctx.process_model.processes, server_cpus or 1),
        database_cores=len(cpu_affinity.parse_cpu_list(database.cpus)) if database.cpus else 1,
    )


def _run_one_step(
    ctx: CaseContext,
    driver: Driver,
    runner: StepRunner,
    ramp_step: RampStep,
    server: Topology,
    monitor: Monitor,
    note_agent: Callable[[list[int]], None],
    attempt: str = "",
) -> tuple[Step, HostLost | None]:
    """One step, recorded; and the load host lost during it, if one was. `attempt` names a
    second attempt in the raw files' labels (`step003-retry-0.txt`)."""
    ctx.run.reporter.step_started(
        index=ramp_step.index, offered=ramp_step.offered, unit=ramp_step.unit
    )
    probe = Probe(server.url, ctx.profile.probe_interval_s, ctx.protocol, ctx.run.certificates)
    ended: dict[str, Any] = {}

    def end_window() -> None:
        """The step's window closes when its load ends (not after the output is parsed)."""
        if not ended:
            ended["probe_ms"] = probe.stop()
            ended["window"] = monitor.end_step()

    monitor.begin_step(ramp_step.index)
    try:
        probe.start()
        result: DriverResult | None = runner(
            ramp_step,
            "-".join(filter(None, (step_label(ramp_step), attempt))),
            note_agent,
            lambda: server_exit(server),  # a dead server ends the step at once
            end_window,
        )
        reason, lost = "", None
    except DriverOutputError as error:
        result, reason = None, str(error)
        lost = error if isinstance(error, HostLost) else None
    finally:
        end_window()
    probe_ms, window = ended["probe_ms"], ended["window"]
    stats = step_stats(monitor.rows, server.telemetry_lines(), window)
    if ctx.run.fleet is not None:  # the load ran on the hosts: their drivers' CPU, summed
        stats["agent_cpu_pct"] = result.driver_cpu_pct if result is not None else None
    server_cpus = cpus_of(ctx.server_cpus)
    noise = step_noise_of(window, server_cpus, cpus_of(ctx.load_cpus))
    if result is None:
        return failed_step(ramp_step, reason, stats, noise), lost
    flags = ["contended"] if noise and is_contended(noise) else []
    agent_cpu_s, agent_cpu_from = (None, None) if ctx.run.fleet else load_cpu_s(window)
    stats["agent_cpu_pct"] = load_cpu_pct(agent_cpu_s, window, stats["agent_cpu_pct"])
    # a fleet's step is driver-bound when any host's driver was
    driver_busy = bool(result.figures.driver_bound_hosts) or is_driver_bound(
        driver,
        result,
        ramp_step,
        agent_cpu_pct=stats["agent_cpu_pct"],
        load_cpu_count=ctx.load_cpu_count,
        calls_per_connection=calls_per_connection(ctx.profile.ramp),
    )
    if stats["cgroup"] and stats["server_cpu_wait_pct"] is not None and window.ended is not None:
        # a throttled server waits for its quota, not for a CPU someone else held
        quota_wait_pct = stats["cgroup"]["throttled_s"] / (window.ended - window.started) * 100
        stats["server_cpu_wait_pct"] = round(
            max(0.0, stats["server_cpu_wait_pct"] - quota_wait_pct), 1
        )
    contended, driver_waited = cpu_contended(stats)
    if result.driver_errors or behind_schedule(result, driver_limited=driver_busy or driver_waited):
        flags.append("driver_capped")
    if contended:
        flags.append("cpu_contended")
    held_back = throttled(stats["cgroup"])
    if held_back is not None:
        flags.append("throttled")
    # what the harness measured around the step, by StepFigures field
    measured = {
        "probe_failures": probe.failures,
        "driver_cpu_pct": result.driver_cpu_pct,
        "server_cpu_wait_pct": stats["server_cpu_wait_pct"],
        "agent_cpu_wait_pct": stats["agent_cpu_wait_pct"],
        "agent_cpu_from": agent_cpu_from,
        "sink_errors_in_step": stats["sink_errors"],
        "backlog_max": stats["backlog_max"],
        # the server's own count, second by second (harness.run.precision reads its spread)
        "replies_per_s": replies_per_second(server.telemetry_lines(), window),
        **(noise or {}),
        **database_cpu(stats),
        "cgroup": CgroupCounters(**stats["cgroup"]) if stats["cgroup"] is not None else None,
        "throttled": Throttling(**held_back) if held_back is not None else None,
        # what the load generator says it spoke, when it says (h2load: h2 or http/1.1)
        "negotiated": result.negotiated,
    }
    step = build_step(ramp_step, result, stats, probe_ms=probe_ms, flags=flags, measured=measured)
    # a driver that ran more than the step's figures in its window (the handshakes
    # profile: full handshakes, then resumed ones) says how many replies the window saw
    window_replies = result.figures.window_replies or step.replies
    step = dataclasses.replace(
        step,
        cpu_us_per_req=cpu_us_per_req(stats["server_cpu_s"], window_replies),
        agent_cpu_us_per_req=cpu_us_per_req(agent_cpu_s, window_replies),
    )
    model = ctx.process_model
    bottleneck = step_bottleneck(
        step,
        # a balancer shares the instances' CPUs
        server_cores=min(len(server_cpus), model.processes + int(model.balanced)),
        server_cpu_count=len(server_cpus),
        driver_busy=driver_busy,
    )
    if bottleneck == "load generator" and driver_busy:
        flags.append("driver_bound")
    return dataclasses.replace(step, flags=tuple(sorted(flags)), bottleneck=bottleneck), None


def cpus_of(cpu_list: str | None) -> frozenset[int]:
    """The CPUs a `taskset -c` list names; None (unpinned): every CPU a child may use."""
    if cpu_list is None:
        return cpu_affinity.unpinned_cpus()
    return frozenset(cpu_affinity.parse_cpu_list(cpu_list))


def load_cpu_pct(
    cpu_s: float | None, window: StepWindow, sampled_pct: float | None
) -> float | None:
    """`cpu_s` as % of one core over the step's window, exact as the server's CPU is; the
    mean of the 1 s samples (`sampled_pct`) only where no CPU time was read. The samples'
    mean read h2load at 71-74 % of its core in rounds where its cgroup counted 97-100 %
    (their first sample straddles the gap before the step), so no step was driver_bound."""
    if cpu_s is None or window.ended is None or window.ended <= window.started:
        return sampled_pct
    return round(100.0 * cpu_s / (window.ended - window.started), 1)


def load_cpu_s(window: StepWindow) -> tuple[float | None, str | None]:
    """The CPU seconds a local step's load generators used, and where that was read: their
    cgroup's counter over the window (`cgroup`: every process they ran, whatever became of
    it), else the children the harness reaped in it (`reaped`: they end and are reaped
    inside the window, their own children included once reaped by them)."""
    before, after = window.load_cgroup_before, window.load_cgroup_after
    if before is not None and after is not None:
        return max(0.0, after.cpu_s - before.cpu_s), "cgroup"
    reaped = reaped_cpu_s(window.cpu_before, window.cpu_after)
    return reaped, "reaped" if reaped is not None else None


def step_noise_of(
    window: StepWindow, server_cpus: frozenset[int], load_cpus: frozenset[int]
) -> dict[str, Any] | None:
    """`other_cpu_pct` and `harness_cpu_pct` of a step window (None without its clocks)."""
    if window.cpu_before is None or window.cpu_after is None:
        return None
    return step_noise(
        window.cpu_before,
        window.cpu_after,
        server_cpus=server_cpus,
        load_cpus=load_cpus,
        reaped_cpus=load_cpus,  # the children reaped in a step are its load generators
        outside_tree_s=outside_tree_s(window),
    )


def outside_tree_s(window: StepWindow) -> float:
    """CPU seconds the server's cgroup counted in the window beyond its process tree's
    clocks (0 without a cgroup)."""
    before, after = window.server_cgroup_before, window.server_cgroup_after
    tree_before, tree_after = window.server_cpu_s_before, window.server_cpu_s_after
    if before is None or after is None or tree_before is None or tree_after is None:
        return 0.0
    tree_s = sum(max(0.0, cpu_s - tree_before.get(pid, 0.0)) for pid, cpu_s in tree_after.items())
    return max(0.0, after.cpu_s - before.cpu_s - tree_s)


def database_cpu(stats: dict[str, Any]) -> dict[str, float]:
    """`{"db_cpu_pct": …}` for a step's figures when the database was watched, else {}."""
    return {"db_cpu_pct": stats["db_cpu_pct"]} if stats.get("db_cpu_pct") is not None else {}


def build_step(
    ramp_step: RampStep,
    result: DriverResult,
    stats: dict[str, Any],
    *,
    probe_ms: float | None,
    flags: list[str],
    measured: dict[str, Any],
) -> Step:
    """A driver's result and the monitor's statistics as one recorded step; `measured`
    is what the harness measured around it, by StepFigures field (a wrong name: TypeError)."""
    total = result.errors_total
    attempts = result.replies + total
    errors = {"total": total, **{kind: n for kind, n in result.errors.items() if n}}
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=round(result.rate, 1),
        replies=result.replies,
        errors=errors,
        error_rate=round(total / attempts, 6) if attempts else 0.0,
        latency_ms=rounded_latency(result.latency_ms),
        latency_uncorrected_ms=(
            rounded_latency(result.latency_uncorrected_ms)
            if result.latency_uncorrected_ms is not None
            else None
        ),
        histograms=dict(result.histograms),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        probe_ms=probe_ms,
        flags=tuple(flags),
        figures=dataclasses.replace(
            result.figures, duration_s=round(result.duration_s, 3), **measured
        ),
    )


def rounded_latency(latency_ms: dict[str, float | None]) -> dict[str, float | None]:
    """Every latency key (None where the driver gave none), to the microsecond."""
    return {
        key: (round(value, 3) if value is not None else None)
        for key, value in {**dict.fromkeys(LATENCY_KEYS), **latency_ms}.items()
    }


def failed_step(
    ramp_step: RampStep,
    reason: str,
    stats: dict[str, Any],
    noise: dict[str, Any] | None = None,
) -> Step:
    """A step whose driver produced no result (it aborted: refused, timed out)."""
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=0.0,
        replies=0,
        errors={"total": 1, "aborted": 1},
        error_rate=1.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        flags=("contended",) if noise and is_contended(noise) else (),
        figures=StepFigures(driver_error=reason, **(noise or {}), **database_cpu(stats)),
        bottleneck="unknown",
    )


def step_label(ramp_step: RampStep) -> str:
    """The name of a step's raw files: `step003` (then `-0.txt`, one per driver process)."""
    return f"step{ramp_step.index:03d}"


def is_aborted(step: Step) -> bool:
    """Whether a step's driver produced no result (`failed_step`)."""
    return (
        step.figures.driver_error is not None
        and step.replies == 0
        and step.errors.get("aborted") == 1
    )


def retried_step(again: Step, *, first: Step, label: str) -> Step:
    """The second attempt at a step whose first gave no figures: what it measured, with the
    first attempt's error and raw files named (`figures.retried`); still no figures, it is
    a lost step (`step_lost`), which the case's status and the summary say."""
    retried = RetriedStep(first_error=first.figures.driver_error, first_raw=f"{label}-*.txt")
    flags = set(again.flags)
    if is_aborted(again):
        flags.add("step_lost")
    return dataclasses.replace(
        again,
        flags=tuple(sorted(flags)),
        figures=dataclasses.replace(again.figures, retried=retried),
    )


def warmup_step(first: RampStep, warmup_s: float) -> RampStep:
    """The first step's load for `warmup_s` (not recorded): caches, JITs, pools settle."""
    connections = None
    if first.connections is not None and first.duration_s:
        connections = max(1, round(first.connections * warmup_s / first.duration_s))
    return dataclasses.replace(first, index=-1, duration_s=warmup_s, connections=connections)

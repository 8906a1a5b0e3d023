"""HTTP steps (rate and concurrency ramps, and the memcached service's, which its driver
speaks over the same steps): the driver restarts for each step.

Warm up at the first step's load (not recorded), count the sink, then for each step run
the driver with the monitor and the probe watching; a server that exits fails the case
with the steps it finished. Who runs a step's load is in harness.run.step_runners, how a
step is recorded in harness.run.step_records, its window's CPU readings in
harness.run.step_cpu.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drivers import build_driver
from drivers.base import Driver, DriverOutputError, DriverResult, Target
from harness import affinity as cpu_affinity
from harness.cpu_sampler import sampling
from harness.fleet.steps import HostLost
from harness.monitor import Monitor, StepWindow, replies_per_second, step_stats
from harness.probe import Probe
from harness.run.bottleneck import (
    behind_schedule,
    cpu_contended,
    cpu_us_per_req,
    database_bound_note,
    is_contended,
    is_driver_bound,
    step_bottleneck,
    throttled,
)
from harness.run.context import CaseContext, Measured
from harness.run.delay import delay_ms_of, held_in_flight
from harness.run.ledger import count_before_load
from harness.run.peak import step_holds, summarize
from harness.run.step_cpu import cpus_of, load_cpu_pct, load_cpu_s, outside_tree_s, step_noise_of
from harness.run.step_records import (
    build_step,
    database_cpu,
    failed_step,
    is_aborted,
    retried_step,
    rounded_latency,
    step_label,
    warmup_step,
)
from harness.run.step_runners import (
    StepRunner,
    calls_per_connection,
    driver_options,
    fleet_runner,
    local_runner,
    request_timeout_s,
)
from harness.topology import Topology
from model.ramps import Ramp, RampStep
from model.results import Step, Summary
from model.step_figures import CgroupCounters, Throttling

# moved to their own modules; named here still for the code that imports them from here
__all__ = [
    "StepRunner",
    "build_step",
    "calls_per_connection",
    "cpus_of",
    "driver_options",
    "failed_step",
    "fleet_runner",
    "is_aborted",
    "load_cpu_pct",
    "load_cpu_s",
    "local_runner",
    "outside_tree_s",
    "request_timeout_s",
    "retried_step",
    "rounded_latency",
    "run_http_case",
    "saturated",
    "server_exit",
    "step_label",
    "step_noise_of",
    "warmup_step",
]


def saturated(ramp: Ramp, step: Step) -> bool:
    """A constant-rate ramp run to saturation ends after this step (it did not hold)."""
    if ramp.kind != "constant-rate" or not ramp.stop_when_saturated:  # type: ignore[union-attr]
        return False
    return not step_holds(step, ramp.saturation_p99_ms)  # type: ignore[union-attr]


def server_exit(server: Topology) -> str | None:
    """Why the server (any of its instances, or their balancer) is gone; None while it runs."""
    return server.process.exit_reason()


def http_target(ctx: CaseContext, server: Topology) -> Target:
    """What the steps' driver loads: the server's port (the memcached service's own port
    for the memcached scenario), the scenario's paths and the case's protocol."""
    scenario, backends = ctx.scenario, ctx.run.backends
    return Target(
        server.host,
        server.mc_port() if scenario.protocol == "memcached" else server.port,
        scenario,
        request_timeout_s(ctx.profile.ramp, ctx.profile.timeout_s),
        paths=backends.paths(scenario) if backends else (),
        expected_body=backends.expected_body(scenario) if backends else None,
        protocol=ctx.protocol,
        # the run's CA (a user's own certificate: None, the system's trust)
        ca_path=ctx.run.certificates.ca_path if ctx.run.certificates else None,
    )


class AgentCpus:
    """Where the load ran, read once from the first driver process; every driver
    process joins the monitor's watch."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        self.cpus: str | None = None

    def note(self, pids: list[int]) -> None:
        """The step's driver processes started (a StepRunner's `on_start`)."""
        self.monitor.set_agent_pids(pids)
        if self.cpus is None and pids:
            time.sleep(0.05)  # taskset has exec'd the driver by now
            self.cpus = cpu_affinity.cpus_allowed(pids[0])


def run_http_case(ctx: CaseContext, server: Topology, monitor: Monitor) -> Measured:
    """Every step of the profile's ramp against the server, one driver run per step (on
    this machine, or split over the fleet's hosts)."""
    profile = ctx.profile
    steps = list(profile.ramp)
    driver = build_driver(profile.driver, profile.ramp, ctx.load_cpu_count, driver_options(profile))
    target = http_target(ctx, server)
    agent = AgentCpus(monitor)
    fleet = ctx.run.fleet
    runner = (
        local_runner(ctx, driver, target) if fleet is None else fleet_runner(ctx, fleet, target)
    )
    if profile.warmup_s > 0:
        try:
            runner(warmup_step(steps[0], profile.warmup_s), "warmup", None, None)
        except HostLost as lost:  # the fleet is short of a host before the first step
            return Measured((), summarize([]), None, error=f"{lost} during the warm-up")
        except DriverOutputError:  # a failed warm-up says nothing the steps will not say
            pass
    stored_before = count_before_load(ctx.store)  # what warm-up and verify stored is not counted
    recorded: list[Step] = []
    for ramp_step in steps:
        error = _ramp_step(ctx, driver, runner, ramp_step, server, monitor, agent, recorded)
        if error is not None:
            return Measured(tuple(recorded), summarize(recorded), agent.cpus, error, stored_before)
        if saturated(profile.ramp, recorded[-1]):
            break  # a ramp to saturation: the next, higher rates would only queue up
        if profile.cooldown_s:
            time.sleep(profile.cooldown_s)
    summary = http_summary(ctx, server, recorded)
    return Measured(tuple(recorded), summary, agent.cpus, stored_before=stored_before)


def _ramp_step(
    ctx: CaseContext,
    driver: Driver,
    runner: StepRunner,
    ramp_step: RampStep,
    server: Topology,
    monitor: Monitor,
    agent: AgentCpus,
    recorded: list[Step],
) -> str | None:
    """One ramp step, recorded into `recorded` (once retried when its driver gave no
    figures while the server lives); why the case cannot go on, or None."""
    with sampling(ctx.run.step_sampler, lambda: server.pids):
        step, lost = _run_one_step(ctx, driver, runner, ramp_step, server, monitor, agent.note)
    if lost is None and is_aborted(step) and server_exit(server) is None:
        # no figures, the server alive: the driver failed (siege's end-of-run hang
        # killed past its grace); once more, both attempts' raw output kept
        again, lost = _run_one_step(
            ctx, driver, runner, ramp_step, server, monitor, agent.note, attempt="retry"
        )
        step = retried_step(again, first=step, label=step_label(ramp_step))
    recorded.append(step)
    ctx.run.reporter.step_finished(step=step)
    if lost is not None:  # the load from here on would not be the load asked for
        return f"{lost} during step {ramp_step.index}"
    exited = server_exit(server)
    if exited is not None:
        return f"{exited} during step {ramp_step.index}: {server.stderr_tail()}"
    return None


def http_summary(ctx: CaseContext, server: Topology, recorded: list[Step]) -> Summary:
    """The steps' summary with the topology, the delay scenario's requests in flight, the
    backends and the notes on what bounded the case."""
    backends = ctx.run.backends
    summary = dataclasses.replace(summarize(recorded), topology=server.describe())
    delay_ms = delay_ms_of(ctx.scenario.path)
    if delay_ms is not None:  # the delay scenario: how many requests it holds in flight
        summary = dataclasses.replace(summary, held_in_flight=held_in_flight(recorded, delay_ms))
    notes = [backends.limit_note() if backends else None, _database_note(ctx, recorded)]
    if backends is not None:
        summary = dataclasses.replace(summary, backends=backends.describe())
    notes = [summary.limit_note, *notes]
    if any(notes):
        summary = dataclasses.replace(summary, limit_note="; ".join(n for n in notes if n))
    return summary


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


@dataclass(frozen=True)
class StepLoad:
    """What one step's load window gave: the driver's result (None: it gave none, and
    `reason` says why), the load host lost in it, the probe's readings and the window."""

    result: DriverResult | None
    reason: str
    lost: HostLost | None
    probe_ms: float | None
    probe_failures: int
    window: StepWindow


def _load_step(
    ctx: CaseContext,
    runner: StepRunner,
    ramp_step: RampStep,
    server: Topology,
    monitor: Monitor,
    note_agent: Callable[[list[int]], None],
    attempt: str,
) -> StepLoad:
    """The step's load run with the probe and the monitor watching; its window closes when
    the load ends (not after the output is parsed)."""
    probe = Probe(server.url, ctx.profile.probe_interval_s, ctx.protocol, ctx.run.certificates)
    ended: dict[str, Any] = {}

    def end_window() -> None:
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
    return StepLoad(result, reason, lost, ended["probe_ms"], probe.failures, ended["window"])


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
    load = _load_step(ctx, runner, ramp_step, server, monitor, note_agent, attempt)
    result, window = load.result, load.window
    stats = step_stats(monitor.rows, server.telemetry_lines(), window)
    if ctx.run.fleet is not None:  # the load ran on the hosts: their drivers' CPU, summed
        stats["agent_cpu_pct"] = result.driver_cpu_pct if result is not None else None
    noise = step_noise_of(window, cpus_of(ctx.server_cpus), cpus_of(ctx.load_cpus))
    if result is None:
        return failed_step(ramp_step, load.reason, stats, noise), load.lost
    return _judged_step(ctx, driver, ramp_step, load, stats, noise, server), None


def _judged_step(
    ctx: CaseContext,
    driver: Driver,
    ramp_step: RampStep,
    load: StepLoad,
    stats: dict[str, Any],
    noise: dict[str, Any] | None,
    server: Topology,
) -> Step:
    """A step whose driver gave a result, with its flags (contended, driver_capped,
    cpu_contended, throttled, driver_bound), its CPU per request and its bottleneck."""
    result, window = load.result, load.window
    assert result is not None
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
    stats["server_cpu_wait_pct"] = _cpu_wait_beyond_quota(stats, window)
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
        "probe_failures": load.probe_failures,
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
    step = build_step(
        ramp_step, result, stats, probe_ms=load.probe_ms, flags=flags, measured=measured
    )
    # a driver that ran more than the step's figures in its window (the handshakes
    # profile: full handshakes, then resumed ones) says how many replies the window saw
    window_replies = result.figures.window_replies or step.replies
    step = dataclasses.replace(
        step,
        cpu_us_per_req=cpu_us_per_req(stats["server_cpu_s"], window_replies),
        agent_cpu_us_per_req=cpu_us_per_req(agent_cpu_s, window_replies),
    )
    return _with_bottleneck(ctx, step, flags, driver_busy)


def _cpu_wait_beyond_quota(stats: dict[str, Any], window: StepWindow) -> float | None:
    """The server's CPU wait less the time its quota throttled it: a throttled server
    waits for its quota, not for a CPU someone else held."""
    wait_pct = stats["server_cpu_wait_pct"]
    if not stats["cgroup"] or wait_pct is None or window.ended is None:
        return wait_pct
    quota_wait_pct = stats["cgroup"]["throttled_s"] / (window.ended - window.started) * 100
    return round(max(0.0, wait_pct - quota_wait_pct), 1)


def _with_bottleneck(ctx: CaseContext, step: Step, flags: list[str], driver_busy: bool) -> Step:
    """The step with its bottleneck and its flags (driver_bound when the load generator
    limited it and was busy)."""
    model = ctx.process_model
    server_cpus = cpus_of(ctx.server_cpus)
    bottleneck = step_bottleneck(
        step,
        # a balancer shares the instances' CPUs
        server_cores=min(len(server_cpus), model.processes + int(model.balanced)),
        server_cpu_count=len(server_cpus),
        driver_busy=driver_busy,
    )
    if bottleneck == "load generator" and driver_busy:
        flags.append("driver_bound")
    return dataclasses.replace(step, flags=tuple(sorted(flags)), bottleneck=bottleneck)

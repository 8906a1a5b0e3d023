"""Who runs one HTTP step's load: the driver on this machine (`local_runner`) or split over
a fleet's hosts (`fleet_runner`), each a StepRunner the case calls once per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from drivers import build_driver
from drivers.base import Driver, DriverOptions, DriverResult, Target, run_step
from harness.fleet.steps import run_fleet_step, split_evenly
from harness.run.context import CaseContext
from model.ramps import ConstantRateRamp, Ramp, RampStep

if TYPE_CHECKING:
    from harness.fleet.client import Fleet
    from harness.profile import Profile


def calls_per_connection(ramp: Ramp) -> int:
    """Requests per connection: a rate ramp's setting; one for the others."""
    return ramp.calls_per_connection if ramp.kind == "rate" else 1  # type: ignore[union-attr]


def request_timeout_s(ramp: Ramp, profile_timeout_s: float) -> float:
    """A rate ramp carries its own timeout (autobench's); the others use the profile's."""
    return ramp.timeout_s if ramp.kind == "rate" else profile_timeout_s  # type: ignore[union-attr]


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

"""Load generators: each runs as its own process and turns one ramp step into a result.

The registry is explicit: a driver's name → how to build it for a profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drivers.ab import AbDriver
from drivers.httperf import HttperfDriver
from drivers.mcload import McLoadDriver
from drivers.siege import SiegeDriver
from drivers.wrk import WrkDriver

if TYPE_CHECKING:
    from drivers.base import Driver

DRIVER_RAMPS: dict[str, tuple[str, ...]] = {
    "wrk": WrkDriver.ramp_kinds,
    "httperf": HttperfDriver.ramp_kinds,
    "ab": AbDriver.ramp_kinds,
    "siege": SiegeDriver.ramp_kinds,
    "mcload": McLoadDriver.ramp_kinds,  # the memcached socket service (seed 001)
    "agent": ("connections",),  # drivers.agent: long-lived processes across the whole ramp
}


def make_driver(
    name: str,
    *,
    agent_cpu_count: int,
    calls_per_connection: int = 10,
    requests_per_step: int | None = None,
) -> Driver:
    """The driver `name`, sized for the load CPUs and the profile's ramp."""
    if name == "wrk":
        return WrkDriver(threads=agent_cpu_count)
    if name == "httperf":
        return HttperfDriver(calls_per_connection=calls_per_connection)
    if name == "ab":
        return AbDriver(requests_per_step=requests_per_step)
    if name == "siege":
        return SiegeDriver()
    if name == "mcload":
        return McLoadDriver(processes=agent_cpu_count)
    raise ValueError(f"unknown driver {name!r}: choose from {', '.join(DRIVER_RAMPS)}")

"""Load generators: each runs as its own process and turns one ramp step into a result.

The registry is explicit and lazy: a driver's name → the `module:Class` that declares it
(its tool, Debian package, ramp kinds and how a profile builds it; see
`drivers.base.DriverClass`). A class is imported only when asked for, so importing one
driver (`drivers.wrk`, a text parser) loads no other. A new driver is its module, its
tests, and one line here; `harness doctor`, the CLI's help and the profile checks read it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drivers.base import Driver, DriverClass, DriverOptions
    from model.ramps import Ramp

DRIVERS: dict[str, str] = {
    "wrk": "drivers.wrk:WrkDriver",
    "httperf": "drivers.httperf:HttperfDriver",
    "ab": "drivers.ab:AbDriver",
    "siege": "drivers.siege:SiegeDriver",
    "oha": "drivers.oha:OhaDriver",  # open loop: constant-rate steps, corrected latency
    "h2load": "drivers.h2load:H2loadDriver",  # HTTP/2 (h2, h2c) and HTTP/1.1, streams
    "handshakes": "drivers.handshakes:HandshakesDriver",  # TLS handshakes/s, resumed or not
    "mcload": "drivers.mcload:McLoadDriver",  # the memcached socket service's load
    "agent": "drivers.agent.plan:AgentDriver",  # WebSocket connection ramps
}


def driver_class(name: str) -> type[DriverClass]:
    """The class registered as `name`, imported now; an unknown name lists the known ones."""
    if name not in DRIVERS:
        raise ValueError(f"unknown driver {name!r}: choose from {', '.join(DRIVERS)}")
    module_name, _, class_name = DRIVERS[name].partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if cls.name != name:
        raise ValueError(f"{DRIVERS[name]} declares itself {cls.name!r}, registered as {name!r}")
    return cls


def driver_classes() -> dict[str, type[DriverClass]]:
    """Every registered driver class, by name (imports them all)."""
    return {name: driver_class(name) for name in DRIVERS}


def build_driver(name: str, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Driver:
    """The driver `name` for a profile's ramp and options, sized for the load CPUs."""
    return driver_class(name).from_profile(ramp, load_cpu_count, options)


def __getattr__(name: str) -> Any:
    # DRIVER_RAMPS (name → ramp kinds) is computed on first use: it imports every driver.
    if name == "DRIVER_RAMPS":
        return {driver: cls.ramp_kinds for driver, cls in driver_classes().items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

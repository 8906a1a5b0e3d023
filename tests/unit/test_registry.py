"""The driver registry: each driver declares itself, and doctor and the CLI read it."""

from __future__ import annotations

import pytest

from drivers import DRIVER_RAMPS, DRIVERS, build_driver, driver_class
from harness.cli.options import DRIVER_OPTION
from harness.tools import SERVICE_TOOLS, TOOLS
from model.ramps import (
    RAMP_KINDS,
    AttackRoundsRamp,
    ConcurrencyRamp,
    ConnectionRamp,
    ConstantRateRamp,
    RateRamp,
)

RAMPS = {
    "rate": RateRamp(low=10, high=20, step=10, calls_per_connection=4),
    "concurrency": ConcurrencyRamp(start=10, stop=20, step=10),
    "connections": ConnectionRamp(start=10, target=20, step=10),
    "constant-rate": ConstantRateRamp(rates=(100, 200), connections=30),
    "h2-attacks": AttackRoundsRamp(attacks=("h2-ping-flood",)),
}


@pytest.mark.parametrize("name", list(DRIVERS))
def test_every_driver_declares_itself(name: str) -> None:
    cls = driver_class(name)
    assert cls.name == name
    assert cls.tool and cls.tool_version_args
    assert cls.ramp_kinds and set(cls.ramp_kinds) <= set(RAMP_KINDS)
    for kind in cls.ramp_kinds:
        driver = build_driver(name, RAMPS[kind], 3, {"requests_per_step": 100})
        assert isinstance(driver, cls)


def test_drivers_are_built_from_the_profile_data() -> None:
    assert build_driver("wrk", RAMPS["concurrency"], 3, {}).threads == 3
    assert build_driver("mcload", RAMPS["concurrency"], 2, {}).processes == 2
    assert build_driver("httperf", RAMPS["rate"], 1, {}).calls_per_connection == 4
    assert (
        build_driver("ab", RAMPS["concurrency"], 1, {"requests_per_step": 7}).requests_per_step == 7
    )
    assert build_driver("ab", RAMPS["concurrency"], 1, {}).requests_per_step is None
    oha = build_driver("oha", RAMPS["constant-rate"], 2, {})
    assert (oha.connections, oha.worker_threads) == (30, 2)


def test_an_unknown_driver_is_answered_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown driver 'nope': choose from wrk, httperf, ab"):
        driver_class("nope")


def test_ramp_kinds_by_driver_come_from_the_classes() -> None:
    assert {name: driver_class(name).ramp_kinds for name in DRIVERS} == DRIVER_RAMPS
    assert DRIVER_RAMPS["agent"] == ("connections",)
    assert DRIVER_RAMPS["httperf"] == ("rate",)
    assert DRIVER_RAMPS["oha"] == ("constant-rate", "rate")


def test_doctor_tool_table_is_the_drivers_tools_and_the_services() -> None:
    packaged = [cls for name in DRIVERS if (cls := driver_class(name)).package is not None]
    for cls in packaged:
        assert TOOLS[cls.tool].package == cls.package
        assert TOOLS[cls.tool].version_args == cls.tool_version_args
    assert {tool.name for tool in SERVICE_TOOLS} <= set(TOOLS)
    assert {
        "wrk",
        "httperf",
        "ab",
        "siege",
        "nginx",
        "memcached",
        "taskset",
        "node",
        "ruby",
    } <= set(TOOLS)
    assert "python" not in TOOLS  # the agent and mcload ship with the harness
    assert TOOLS["oha"].crate == ("oha", "1.16.0")  # built with cargo, not apt-get


def test_the_cli_driver_help_names_every_driver() -> None:
    for name in DRIVERS:
        assert name in DRIVER_OPTION.help

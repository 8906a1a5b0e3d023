"""What every driver shares, in one place to import it from: the step result shape
(drivers.result), the target and the driver's protocol (drivers.protocol), running its
processes under a watchdog (drivers.watchdog), and the pinned cargo builds of tools that
ship as crates.
"""

from __future__ import annotations

from pathlib import Path

from drivers.protocol import Driver, DriverClass, DriverOptions, Target
from drivers.result import (
    SERVER_ERROR_KINDS,
    DriverOutputError,
    DriverResult,
    merge_results,
    no_latency,
)
from drivers.watchdog import (
    CLOSED_CONNECTIONS,
    OVERRUN_MARGIN_S,
    POLL_S,
    STOP_GRACE_S,
    DriverProcesses,
    Overrun,
    check_negotiated,
    close_connections_to,
    pinned,
    run_step,
    scheduled_run_s,
)
from model.files import cache_dir

__all__ = [
    "CARGO_PREFIX",
    "CLOSED_CONNECTIONS",
    "OVERRUN_MARGIN_S",
    "POLL_S",
    "SERVER_ERROR_KINDS",
    "STOP_GRACE_S",
    "Driver",
    "DriverClass",
    "DriverOptions",
    "DriverOutputError",
    "DriverProcesses",
    "DriverResult",
    "Overrun",
    "Target",
    "cargo_binary",
    "cargo_crate",
    "cargo_root",
    "check_negotiated",
    "close_connections_to",
    "merge_results",
    "no_latency",
    "pinned",
    "run_step",
    "scheduled_run_s",
]

CARGO_PREFIX = "cargo:"


def cargo_crate(package: str | None) -> tuple[str, str] | None:
    """(crate, version) of a `cargo:<crate>@<version>` package; None for a Debian one."""
    if package is None or not package.startswith(CARGO_PREFIX):
        return None
    crate, _, version = package.removeprefix(CARGO_PREFIX).partition("@")
    if not crate or not version:
        raise ValueError(f"{package!r} is not cargo:<crate>@<version>")
    return crate, version


def cargo_root(crate: str, version: str) -> Path:
    """Where `cargo install --root` puts one pinned crate: the harness's cache, one
    directory per version (never the repository, never ~/.cargo/bin)."""
    return cache_dir() / f"{crate}-{version}"


def cargo_binary(tool: str, package: str) -> Path:
    """The pinned build of a cargo-packaged `tool` (it may not exist yet)."""
    crate = cargo_crate(package)
    if crate is None:
        raise ValueError(f"{tool}: {package!r} is not a cargo package")
    return cargo_root(*crate) / "bin" / tool

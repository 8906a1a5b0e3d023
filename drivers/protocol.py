"""What a driver is: where its load goes (`Target`), what a profile tells it
(`DriverOptions`), and what every driver class declares and does (`DriverClass`, `Driver`).
A driver turns one ramp step into one or more command lines, and a pure parser turns each
process's output into a DriverResult (drivers.result)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, Self, TypedDict

from drivers.result import DriverResult
from model.ramps import Ramp, RampStep
from model.scenarios import Scenario
from servers.contract import PROTOCOL_H1, TLS_PROTOCOLS


@dataclass(frozen=True)
class Target:
    """Where the load goes and what it asks for."""

    host: str
    port: int
    scenario: Scenario
    timeout_s: float = 5.0
    paths: tuple[str, ...] = ()  # random-path scenarios: each request picks one of these
    expected_body: bytes | None = None  # checked scenarios: every reply must carry this
    protocol: str = PROTOCOL_H1  # servers.contract.PROTOCOLS: what the step must speak
    ca_path: Path | None = None  # the CA a TLS client trusts (None: the system's)

    @property
    def scheme(self) -> str:
        """`https` for the TLS protocols, else `http` (h2c is cleartext)."""
        return "https" if self.protocol in TLS_PROTOCOLS else "http"

    @property
    def authority(self) -> str:
        """host:port as a URL writes it (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.scenario.path}"

    def urls(self) -> list[str]:
        """Every URL the step may ask for (the scenario's one, or one per random path)."""
        paths = self.paths or (self.scenario.path,)
        return [f"{self.scheme}://{self.authority}{path}" for path in paths]


class DriverOptions(TypedDict, total=False):
    """What a profile tells a driver beyond the ramp, as plain data."""

    requests_per_step: int | None  # ab -n: a fixed request count per step instead of a time
    # h2load: the connections a step's concurrency is multiplexed over, as streams per
    # connection (None: one connection per request in flight, as wrk)
    multiplexed_connections: int | None
    # handshakes: offer the previous connection's TLS session (resumed handshakes)
    tls_resumption: bool | str  # the handshakes driver: True, False or "both"


class DriverClass(Protocol):
    """What every driver class declares: the registry (`drivers.DRIVERS`), doctor's tool
    table and the CLI's help are read from these, so a new driver is written down once."""

    name: ClassVar[str]
    tool: ClassVar[str]  # the executable it runs ("python": one of ours, nothing to install)
    # the Debian package that has `tool`, or `cargo:<crate>@<version>` for a tool built
    # from crates.io into the harness's cache (`cargo_binary`); None: ships with us
    package: ClassVar[str | None]
    tool_version_args: ClassVar[tuple[str, ...]]  # how `harness doctor` asks its version
    ramp_kinds: ClassVar[tuple[str, ...]]  # model.ramps kinds it runs
    protocols: ClassVar[tuple[str, ...]]  # servers.contract.PROTOCOLS it can speak
    # (optional) `ca_trusted: bool`: whether its TLS steps verify the server's certificate
    # against the run's CA (run.json's negotiated.ca_trusted); a driver without it does not say
    # the signal on which the tool stops early and still prints its totals (the watchdog's;
    # a tool that prints nothing on any signal names SIGTERM and loses an overrun step)
    stop_signal: ClassVar[int]
    checks_bodies: ClassVar[bool]  # compares every reply's body (checked scenarios)

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        """The driver for a profile's ramp, sized for the load CPUs."""
        ...


class Driver(DriverClass, Protocol):
    """A load generator run step by step: command lines for a step, a parser for their output."""

    # A driver that spins whatever the load (httperf) is judged driver-bound by the load it
    # failed to offer, not by its CPU use.
    busy_polls: bool

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]: ...

    # `text`: one process's output; `step` and `workdir` as given to `commands` (a driver
    # that also writes files there, oha's request log, reads them back)
    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult: ...

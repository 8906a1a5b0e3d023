"""What every driver shares: the step result shape, the target, and running its processes.

A driver turns one ramp step into one or more command lines (each run pinned with
`taskset -c`), and a pure parser turns each process's output into a `DriverResult`.
Error kinds are common to every driver so that charts and tables compare like with like:

- connect:   connection refused or failed to open
- timeout:   no (complete) reply within the timeout
- reset:     connection reset by the server
- read, write: socket errors while reading or sending
- status:    a reply that was not 2xx
- length:    a reply whose length differed from the first (ab), when lengths must agree
- wrong:     a 2xx reply whose body was not the expected one (checked scenarios)
- other:     anything else the tool reports
- driver_*:  the load generator's own limits (httperf's fd-unavail, addrunavail, ftab-full):
             not the server's fault, kept out of `total` and flagged `driver_capped`.

The watchdog (`run_step`): a driver that runs for a time (`scheduled_run_s`) and is still
running `OVERRUN_MARGIN_S` past that time and the request timeout is sent its
`stop_signal`, the signal on which the tool stops and still prints its totals (siege,
wrk, ab and oha: SIGINT, as Ctrl-C at a terminal); what it prints then is the step's
figures, with the real duration the tool reports, and the result says how long it
overran (`extra["overran_s"]`). Only a driver still running `STOP_GRACE_S` after the
signal is killed, and its step has no figures. docs/results.md ("A hung load generator")
says what each tool does on its signal.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypedDict

from drivers import histograms as hdr
from drivers.processes import kill_group, load_cgroup_procs, signal_name, spawn
from model.errors import UserError
from model.files import cache_dir
from model.ramps import Ramp, RampStep
from model.results import LATENCY_KEYS
from model.scenarios import Scenario
from servers.contract import PROTOCOL_H1, TLS_PROTOCOLS

SERVER_ERROR_KINDS = (
    "connect", "timeout", "reset", "read", "write", "status", "length", "wrong", "other",
)  # fmt: skip


class DriverOutputError(ValueError):
    """A driver's output holds no result (it aborted, or is not the tool's output)."""


@dataclass(frozen=True)
class DriverResult:
    """One driver process's measurement of one step."""

    replies: int  # good (2xx) replies
    duration_s: float
    errors: dict[str, int]  # by kind; `driver_*` kinds are the generator's own limits
    latency_ms: dict[str, float | None]
    achieved: float | None = None  # good replies/s as the tool reports it; else replies/duration
    driver_cpu_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # open-loop drivers: the same requests timed from their actual send (latency_ms counts
    # from the intended send)
    latency_uncorrected_ms: dict[str, float | None] | None = None
    # name (model.results.HISTOGRAM_NAMES) → base64 HdrHistogram of µs (drivers.histograms)
    histograms: dict[str, str] = field(default_factory=dict)
    # the protocol the tool reports it spoke (servers.contract.PROTOCOLS); None: it does not
    # say (a step is then judged by what its server was started with)
    negotiated: str | None = None

    @property
    def errors_total(self) -> int:
        """Errors the server is answerable for (the driver's own limits excluded)."""
        return sum(n for kind, n in self.errors.items() if not kind.startswith("driver_"))

    @property
    def driver_errors(self) -> int:
        return sum(n for kind, n in self.errors.items() if kind.startswith("driver_"))

    @property
    def rate(self) -> float:
        if self.achieved is not None:
            return self.achieved
        return self.replies / self.duration_s if self.duration_s > 0 else 0.0


def no_latency() -> dict[str, float | None]:
    return dict.fromkeys(LATENCY_KEYS)


def merge_results(results: Sequence[DriverResult]) -> DriverResult:
    """Several processes that ran side by side (httperf --client i/n) as one result.

    Histograms every process kept are added (exact), and the latency figures are read
    from the sum; without them only the average (weighted) and the maximum can be merged.
    """
    if len(results) == 1:
        return results[0]
    replies = sum(r.replies for r in results)
    errors: dict[str, int] = {}
    for result in results:
        for kind, count in result.errors.items():
            errors[kind] = errors.get(kind, 0) + count
    latency = no_latency()
    averages = [
        (r.latency_ms["avg"], r.replies) for r in results if r.latency_ms["avg"] is not None
    ]
    if averages and sum(w for _, w in averages):
        latency["avg"] = sum(v * w for v, w in averages) / sum(w for _, w in averages)
    maxima = [r.latency_ms["max"] for r in results if r.latency_ms["max"] is not None]
    latency["max"] = max(maxima) if maxima else None
    cpus = [r.driver_cpu_pct for r in results if r.driver_cpu_pct is not None]
    extra: dict[str, Any] = {"processes": len(results)}
    for result in results:
        for key, value in result.extra.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                extra[key] = extra.get(key, 0) + value
    histograms: dict[str, str] = {}
    uncorrected = None
    for name in {name for r in results for name in r.histograms}:
        if all(name in r.histograms for r in results):
            merged = hdr.merge([hdr.decode(r.histograms[name]) for r in results])
            histograms[name] = hdr.encode(merged)
            if name == "latency":
                latency = hdr.latency_ms(merged)
            elif name == "latency_uncorrected":
                uncorrected = hdr.latency_ms(merged)
    spoken = {r.negotiated for r in results if r.negotiated is not None}
    return DriverResult(
        replies=replies,
        duration_s=max(r.duration_s for r in results),
        errors=errors,
        latency_ms=latency,
        achieved=sum(r.rate for r in results),
        driver_cpu_pct=sum(cpus) if cpus else None,
        extra=extra,
        latency_uncorrected_ms=uncorrected,
        histograms=histograms,
        # what every process that said agreed on (two different ones: none is claimed)
        negotiated=spoken.pop() if len(spoken) == 1 else None,
    )


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


def pinned(command: list[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *command] if cpus is not None else command


POLL_S = 0.1  # how often a step's processes (and its abort condition) are looked at
# A time-bound driver still running this long past its step and the request timeout is
# overrunning (siege 4.0's end-of-run hang): it is sent its stop signal.
OVERRUN_MARGIN_S = 2.0
STOP_GRACE_S = 5.0  # then it has this long to print its totals before it is killed


def scheduled_run_s(driver: Driver, step: RampStep) -> float | None:
    """How long the driver's processes run by themselves: the step's duration, or None
    for a driver that counts requests instead of time (ab -n), which only the hard limit
    stops."""
    if getattr(driver, "counts_requests", False) or not step.duration_s:
        return None
    return step.duration_s


@dataclass(frozen=True)
class Overrun:
    """A driver that outlived its step and was sent its stop signal."""

    signal_name: str  # SIGINT, or what the driver's own stop did (`close_connections_to`)
    overran_s: float  # from its scheduled end to the moment it ended (or was killed)
    answered: bool  # it ended within the grace after the signal (its totals may be there)


class DriverProcesses:
    """A step's driver processes, started together, each writing its raw output to a file;
    each joins the case's load cgroup where there is one (`set_load_cgroup_procs`)."""

    def __init__(self, commands: list[list[str]], cpus: str | None, raw_paths: list[Path]) -> None:
        self.raw_paths = raw_paths
        self.commands = commands
        self.processes: list[subprocess.Popen[bytes]] = []
        self.overrun: Overrun | None = None  # set by `wait` when the watchdog signalled
        try:
            for command, raw_path in zip(commands, raw_paths, strict=True):
                with raw_path.open("wb") as raw:
                    raw.write(("$ " + " ".join(command) + "\n").encode())
                    raw.flush()
                    self.processes.append(
                        spawn(
                            pinned(command, cpus),
                            stdout=raw,
                            stderr=subprocess.STDOUT,
                            cgroup_procs=load_cgroup_procs(),
                        )
                    )
        except BaseException as error:  # Ctrl-C between two starts included
            self.kill()
            if not isinstance(error, FileNotFoundError):
                raise
            raise UserError(f"{error.filename} not found: run `harness doctor --install`") from None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def running(self) -> bool:
        return any(p.poll() is None for p in self.processes)

    def wait(
        self,
        timeout_s: float,
        abort: Callable[[], str | None] | None = None,
        *,
        stop_after_s: float | None = None,
        stop_signal: int = signal.SIGINT,
        scheduled_s: float = 0.0,
        stop: Callable[[], str] | None = None,
    ) -> str | None:
        """Wait for every process; None when all ended, else why they were all killed: the
        time ran out, `abort` (asked every POLL_S) gave a reason to stop now, or a process
        did not end within STOP_GRACE_S of its stop signal.

        `stop_after_s`: the watchdog — processes still running then are sent `stop_signal`
        (the tool's own way to stop and print its totals) and `self.overrun` says so;
        `scheduled_s` is when they were due to end, from which the overrun is counted.
        `stop`, when given, stops them instead of the signal and returns what it did (the
        overrun's `stopped_by`): h2load's closes its connections (`close_connections_to`).
        """
        started = time.monotonic()
        deadline = started + timeout_s
        signalled_at: float | None = None
        stopped_by = signal.Signals(stop_signal).name
        self.overrun = None
        while self.running():
            now = time.monotonic()
            reason = abort() if abort is not None else None
            if reason is None and now > deadline:
                reason = f"did not finish within {timeout_s:.0f} s"
            overdue = stop_after_s is not None and now - started > stop_after_s
            if reason is None and signalled_at is None and overdue:
                signalled_at = now
                if stop is None:
                    self.signal(stop_signal)
                else:
                    stopped_by = stop()
            if reason is None and signalled_at is not None and now - signalled_at > STOP_GRACE_S:
                reason = (
                    f"did not stop within {STOP_GRACE_S:.0f} s of {stopped_by}, done "
                    f"{stop_after_s - scheduled_s:.0f} s past its step's end"
                )
            if reason is not None:
                self.kill()
                if signalled_at is not None:
                    self.overrun = self._overrun(stopped_by, started, scheduled_s, False)
                return reason
            time.sleep(POLL_S)
        if signalled_at is not None:
            self.overrun = self._overrun(stopped_by, started, scheduled_s, True)
        return None

    @staticmethod
    def _overrun(stopped_by: str, started: float, scheduled_s: float, answered: bool) -> Overrun:
        overran_s = round(time.monotonic() - started - scheduled_s, 2)
        return Overrun(stopped_by, overran_s, answered)

    def signal(self, signum: int) -> None:
        """Send `signum` to each running process (the tool itself: taskset has exec'd it)."""
        for process in self.processes:
            if process.poll() is None:
                kill_group(process, signum)

    def killed(self) -> str | None:
        """`wrk (pid 12) was killed by SIGKILL` for the first process a signal ended."""
        for command, process in zip(self.commands, self.processes, strict=False):
            name = signal_name(process.returncode)
            if name is not None:
                tool = Path(command[0]).name
                return f"{tool} (pid {process.pid}) was killed by {name}"
        return None

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                kill_group(process)
                process.wait()

    def outputs(self) -> list[str]:
        """Each process's output, without the command line written above it."""
        texts = []
        for path in self.raw_paths:
            text = path.read_text(errors="replace")
            texts.append(text.split("\n", 1)[1] if text.startswith("$ ") else text)
        return texts


CLOSED_CONNECTIONS = "its connections closed (ss -K)"


def close_connections_to(host: str, port: int) -> str:
    """Have the kernel close every TCP connection to `host`:`port` (`ss -K`: the
    SOCK_DESTROY of CONFIG_INET_DIAG_DESTROY; needs CAP_NET_ADMIN). The server's own
    sockets have the port as their source, so only its clients' are matched. What it did,
    for the overrun's `stopped_by`: CLOSED_CONNECTIONS, or why it could not."""
    command = ["ss", "-K", "-tn", "dst", host, "dport", "=", f":{port}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"ss -K could not run ({error})"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"ss -K failed ({said[-1] if said else f'exit {done.returncode}'})"
    return CLOSED_CONNECTIONS


def check_negotiated(tool: str, result: DriverResult, target: Target) -> None:
    """DriverOutputError when the tool reports it spoke another protocol than the case's
    (a fallback is an error, never a figure); a tool that does not say passes."""
    if result.negotiated is not None and result.negotiated != target.protocol:
        raise DriverOutputError(
            f"{tool} spoke {result.negotiated} where the case is {target.protocol}: "
            "a fallback is an error, never a figure"
        )


def run_step(
    driver: Driver,
    step: RampStep,
    target: Target,
    cpus: str | None,
    raw_dir: Path,
    label: str,
    on_start: Callable[[list[int]], None] | None = None,
    abort: Callable[[], str | None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> DriverResult:
    """Run one step's driver processes to the end and parse them (one merged result).
    `on_end` is called once the processes have ended, before their output is parsed: the
    step's measuring window closes there (parsing h2load's log of 300,000 requests took
    ~0.5 s, which read as 15 % of the load CPU and diluted every CPU share of the step).

    Raw output goes to `raw_dir/<label>-<i>.txt`. The step fails with DriverOutputError,
    saying why, when a process outlives the step by more than the timeout and a margin,
    when `abort` gives a reason (the server died: no need to wait for the step's end), or
    when a driver process was killed by a signal, or when a process reports it spoke
    another protocol than the Target's (check_negotiated).
    """
    raw_dir.mkdir(parents=True, exist_ok=True)
    commands = driver.commands(step, target, raw_dir)
    paths = [raw_dir / f"{label}-{i}.txt" for i in range(len(commands))]
    processes = DriverProcesses(commands, cpus, paths)
    expected_s = (step.duration_s or 0.0) + target.timeout_s + 30.0
    scheduled_s = scheduled_run_s(driver, step)
    stop_after_s = (
        scheduled_s + target.timeout_s + OVERRUN_MARGIN_S if scheduled_s is not None else None
    )
    try:  # whatever happens from here (Ctrl-C included), no driver outlives the step
        if on_start is not None:
            on_start(processes.pids)
        stopped = processes.wait(
            expected_s,
            abort,
            stop_after_s=stop_after_s,
            stop_signal=driver.stop_signal,
            scheduled_s=scheduled_s or 0.0,
            stop=(
                functools.partial(close_connections_to, target.host, target.port)
                if getattr(driver, "stops_by_closing_connections", False)
                else None
            ),
        )
    finally:
        processes.kill()
        if on_end is not None:
            on_end()
    if stopped is not None:
        raise DriverOutputError(f"{driver.name} stopped: {stopped}")
    overrun = processes.overrun
    killed = processes.killed()
    if killed is not None and not (overrun is not None and killed.endswith(overrun.signal_name)):
        raise DriverOutputError(killed)
    try:
        results = [driver.parse(text, target, step, raw_dir) for text in processes.outputs()]
    except DriverOutputError as error:
        if overrun is None:
            raise
        raise DriverOutputError(
            f"{driver.name} overran its step by {overrun.overran_s:g} s and printed no totals "
            f"on {overrun.signal_name}: {error}"
        ) from None
    for each in results:
        check_negotiated(driver.name, each, target)
    result = merge_results(results)
    if overrun is None:
        return result
    return dataclasses.replace(
        result,
        extra={**result.extra, "overran_s": overrun.overran_s, "stopped_by": overrun.signal_name},
    )

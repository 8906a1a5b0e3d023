"""Running a step's driver processes: each pinned with `taskset -c`, raw output to a
file, and a watchdog for a tool that does not stop.

The watchdog (`run_step`): a driver that runs for a time (`scheduled_run_s`) and is still
running `OVERRUN_MARGIN_S` past that time and the request timeout is sent its
`stop_signal`, the signal on which the tool stops and still prints its totals (siege,
wrk, ab and oha: SIGINT, as Ctrl-C at a terminal); what it prints then is the step's
figures, with the real duration the tool reports, and the result says how long it
overran (`figures.overran_s`). Only a driver still running `STOP_GRACE_S` after the
signal is killed, and its step has no figures. docs/results.md ("A hung load generator")
says what each tool does on its signal.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from drivers.processes import kill_group, load_cgroup_procs, signal_name, spawn
from drivers.protocol import Driver, Target
from drivers.result import DriverOutputError, DriverResult, merge_results
from model.errors import UserError
from model.ramps import RampStep


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
        figures=dataclasses.replace(
            result.figures, overran_s=overrun.overran_s, stopped_by=overrun.signal_name
        ),
    )

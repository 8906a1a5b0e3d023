"""What runs on a load host: one Dask task per host and step, pinned to that host.

A task never runs its load twice: it claims its step first (a Dask Event named for the
step and host) and refuses a step already claimed, so neither a retry nor a restarted
worker of the same name can start a load phase again. Then it prepares, says it is ready,
and waits for the harness's `go` (one Event for every host: the step's barrier); it
records when it saw the signal and when its load started, runs the driver in its own
processes (tied to the task's thread: they die with it, and with the worker), and gives
back the parsed result with the raw output. The harness's `stop` Event ends the load at
once (the server died, another host was lost, Ctrl-C).

Times are the host's own clock (time.time()): across machines they compare only as well
as the clocks are synchronized; on one machine (namespace hosts) exactly.
"""

from __future__ import annotations

import contextlib
import resource
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drivers.agent.plan import AgentOutputs
from drivers.base import Driver, DriverOutputError, DriverProcesses, DriverResult, Target, run_step
from model.ramps import RampStep
from servers import scratch

STOP_POLL_S = 0.5  # how often a running task asks whether the harness said stop
PUBLISH_INTERVAL_S = 0.5  # how often an agents task publishes its agents' newest lines


class StepClaimed(RuntimeError):
    """A task found its step already claimed: the load phase would run a second time."""


@dataclass(frozen=True)
class StepSignals:
    """The names of one step's Dask events, as the harness and every host know them."""

    prefix: str  # harness/<run id>/<case>/<step label>: unique over every run

    @property
    def go(self) -> str:
        return f"{self.prefix}/go"

    @property
    def stop(self) -> str:
        return f"{self.prefix}/stop"

    def ready(self, host: str) -> str:
        return f"{self.prefix}/ready/{host}"

    def claimed(self, host: str) -> str:
        return f"{self.prefix}/claimed/{host}"

    def lines(self, host: str) -> str:
        """The Variable an agents task publishes its agents' newest lines in."""
        return f"{self.prefix}/lines/{host}"

    @property
    def released(self) -> str:
        """The Variable the harness sets to the step every agent of a ramp may hold now."""
        return f"{self.prefix}/released"

    def events(self, hosts: list[str]) -> list[str]:
        """Every event name of the step (the harness clears them all at its end)."""
        per_host = [name(h) for h in hosts for name in (self.ready, self.claimed)]
        return [self.go, self.stop, *per_host]


@dataclass
class HostOutcome:
    """What one host's task gives back: its result (or why it has none), when it started,
    its raw output (file name → text) and its driver processes' CPU time."""

    host: str
    result: DriverResult | None = None
    error: str | None = None
    ready_at: float | None = None  # host clock: prepared, waiting for the go
    go_seen_at: float | None = None  # host clock: the go arrived
    started_at: float | None = None  # host clock: its load processes started
    driver_cpu_s: float | None = None
    raw: dict[str, str] = field(default_factory=dict)
    final_lines: dict[int, dict[str, Any]] = field(default_factory=dict)  # agents


def _claim(signals: StepSignals, host: str) -> None:
    from distributed import Event  # on the host (a Dask worker), where it is loaded already

    claim = Event(signals.claimed(host))
    if claim.is_set():
        raise StepClaimed(f"{signals.prefix} already ran on {host}: a load phase never runs twice")
    claim.set()


def _await_go(signals: StepSignals, host: str, outcome: HostOutcome, timeout_s: float) -> bool:
    """Say ready and wait for the step's go; False (with the reason) if it never came or
    the harness said stop instead."""
    from distributed import Event

    outcome.ready_at = time.time()
    Event(signals.ready(host)).set()
    if not Event(signals.go).wait(timeout_s):
        outcome.error = f"no start signal within {timeout_s:.0f} s"
        return False
    outcome.go_seen_at = time.time()
    if Event(signals.stop).is_set():
        outcome.error = "stopped by the harness before the start"
        return False
    return True


def _stop_checker(signals: StepSignals) -> Callable[[], str | None]:
    """`run_step`'s abort: the harness's stop, asked at most every STOP_POLL_S."""
    from distributed import Event

    stop = Event(signals.stop)
    asked = {"at": 0.0}

    def stopped() -> str | None:
        now = time.monotonic()
        if now - asked["at"] < STOP_POLL_S:
            return None
        asked["at"] = now
        return "stopped by the harness" if stop.is_set() else None

    return stopped


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _raw_texts(directory: Path) -> dict[str, str]:
    return {path.name: path.read_text(errors="replace") for path in sorted(directory.glob("*.txt"))}


def run_driver_on_host(
    host: str,
    signals: StepSignals,
    driver: Driver,
    step: RampStep,
    target: Target,
    cpus: str | None,
    label: str,
    barrier_timeout_s: float,
) -> HostOutcome:
    """One host's share of an HTTP step (its own `step.offered`): claim, barrier, run."""
    _claim(signals, host)
    outcome = HostOutcome(host)
    workdir = scratch.mkdtemp("fleet")
    try:
        if not _await_go(signals, host, outcome, barrier_timeout_s):
            return outcome
        cpu_before = _children_cpu_s()
        outcome.started_at = time.time()
        try:
            outcome.result = run_step(
                driver, step, target, cpus, workdir, label, abort=_stop_checker(signals)
            )
        except DriverOutputError as error:
            outcome.error = str(error)
        outcome.driver_cpu_s = _children_cpu_s() - cpu_before
        outcome.raw = _raw_texts(workdir)
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def hold_connections_on_host(
    host: str,
    signals: StepSignals,
    commands: list[list[str]],
    cpus: str | None,
    barrier_timeout_s: float,
) -> HostOutcome:
    """One host's agent processes for a whole connection ramp: claim, barrier, start them,
    publish their newest lines every PUBLISH_INTERVAL_S until they end, and pass each step
    the harness releases on to them (SIGUSR1: every agent of every host was ready at it).

    The harness's `stop` ends them as the stress mode does (SIGTERM: they close their
    connections and print a final line); the task's end kills whatever is left.
    """
    from distributed import Event, Variable

    _claim(signals, host)
    outcome = HostOutcome(host)
    workdir = scratch.mkdtemp("fleet")
    lines = Variable(signals.lines(host))
    lines.set({})  # before the barrier: the harness reads it from the go on
    released = Variable(signals.released)
    released.set(-1)
    try:
        if not _await_go(signals, host, outcome, barrier_timeout_s):
            return outcome
        paths = [workdir / f"agent-{index}.txt" for index in range(len(commands))]
        cpu_before = _children_cpu_s()
        outcome.started_at = time.time()
        processes = DriverProcesses(commands, cpus, paths)
        outputs = AgentOutputs(paths)
        stop = Event(signals.stop)
        ending = False
        passed_on = -1  # the last released step this host's agents were told of
        try:
            while processes.running():
                time.sleep(PUBLISH_INTERVAL_S)
                lines.set(outputs.read())
                step = int(released.get(timeout=PUBLISH_INTERVAL_S * 20))
                if step > passed_on:
                    passed_on = step
                    processes.signal(signal.SIGUSR1)
                if not ending and stop.is_set():
                    ending = True
                    for process in processes.processes:
                        with contextlib.suppress(ProcessLookupError):
                            process.terminate()
        finally:
            processes.kill()
        outcome.final_lines = outputs.read_final()
        lines.set(outcome.final_lines)
        outcome.driver_cpu_s = _children_cpu_s() - cpu_before
        outcome.raw = _raw_texts(workdir)
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

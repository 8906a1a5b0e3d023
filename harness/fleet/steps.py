"""One step's load across a fleet's hosts: split, pinned, started together, merged exactly.

Each host's task is submitted pinned to its worker (`workers=[address]`,
`allow_other_workers=False`, `retries=0`; the scheduler runs with `allowed_failures = 0`),
so a task whose host dies fails instead of moving to another host. Every task says when it
is ready; then the harness sets the step's `go` Event and all hosts start together; each
records when its load started, and the spread of those starts (the skew) is kept per host.

While the hosts run, the harness watches for a lost host (its worker left the scheduler, or
its task failed with KilledWorker): the step fails naming the host and why, the other hosts
are told to stop, and the case ends — a lost host's last seconds are lost, so its figures
are not guessed (Locust's master keeps the last ones it had).

Merging is exact where the drivers allow it: replies, errors, requests and bytes are summed
and the mean latency weighted by replies; the maximum is the hosts' maximum. A driver that
keeps HdrHistograms (oha: corrected and uncorrected latency) has them added, and the merged
percentiles are read from the sum — exact. wrk, httperf, ab and siege give percentiles (or
none), not histograms, and percentiles of parts do not average into the whole's: the merged
p50/p90/p99 are then left unavailable (null), each host's are kept in `figures.hosts`, and
`figures.latency_upper_bound_ms` holds the hosts' largest — an upper bound of the merged
percentile (if no host has more than 1 % of its replies above X, neither has the whole).

The load is split evenly: a concurrency step's connections, a rate step's rate and the
connections it opens (httperf), a connection ramp's target (harness.fleet.agents); the
per-step request count of ab and the connections oha keeps open are split when the drivers
are made (harness.run.http_case.fleet_runner).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drivers.base import Driver, DriverOutputError, DriverResult, Target, merge_results
from harness.fleet.security import check_file_name, check_member_name
from harness.fleet.tasks import HostOutcome, StepSignals, run_driver_on_host
from model.ramps import RampStep

if TYPE_CHECKING:
    from harness.fleet.client import Fleet, LoadHost

POLL_S = 0.25
BARRIER_TIMEOUT_S = 60.0  # every host ready for the go within this, or the step fails
STOP_WAIT_S = 15.0  # after a stop, how long the other hosts have to give back what they ran
PERCENTILES = ("p50", "p90", "p99")
DRIVER_BOUND_SHARE = 0.9  # a host whose driver used this much of its load CPUs


class HostLost(DriverOutputError):
    """A load host was lost during a step (its worker left, or died running the task)."""

    def __init__(self, host: str, reason: str) -> None:
        super().__init__(f"host {host} lost: {reason}")
        self.host = host


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` over `parts` as evenly as whole numbers allow (the first ones get the rest)."""
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


class HostTasks:
    """One task per host for one step (or ramp): submitted pinned, started behind the
    barrier, watched for a lost host, collected."""

    def __init__(
        self,
        fleet: Fleet,
        label: str,
        hosts: list[LoadHost],
        submit: Callable[[LoadHost, StepSignals], Any],
    ) -> None:
        from distributed import Event

        self.fleet = fleet
        self.hosts = hosts
        self.signals = StepSignals(f"harness/{uuid.uuid4().hex[:12]}/{label}")
        self._event = lambda name: Event(name, client=fleet.client)
        self.futures = {host.name: submit(host, self.signals) for host in hosts}
        self.go_at: float | None = None
        self._stopped = False

    def lost(self) -> HostLost | None:
        """The first host lost: its worker left the scheduler, or its task was killed."""
        from distributed.scheduler import KilledWorker

        present = self.fleet.present()
        for host in self.hosts:
            future = self.futures[host.name]
            if future.status == "error":
                error = future.exception()
                if isinstance(error, KilledWorker):
                    return HostLost(host.name, "its Dask worker died while running the step")
            if future.status != "finished" and host.address not in present:
                return HostLost(host.name, f"its Dask worker {host.address} left the scheduler")
        return None

    def failed(self) -> DriverOutputError | None:
        """A task that raised (a lost host first, then any other error), naming its host."""
        lost = self.lost()
        if lost is not None:
            return lost
        for name, future in self.futures.items():
            if future.status == "error":
                error = future.exception()
                return DriverOutputError(f"host {name}: {type(error).__name__}: {error}")
        return None

    def start(self, abort: Callable[[], str | None] | None = None) -> None:
        """Wait until every host is ready, then give the go; DriverOutputError (HostLost for
        a lost host) when one never gets ready."""
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        waiting = [host.name for host in self.hosts]
        while waiting:
            failure = self.failed()
            reason = abort() if abort is not None else None
            if failure is None and reason is None and time.monotonic() > deadline:
                reason = f"{', '.join(waiting)} not ready within {BARRIER_TIMEOUT_S:.0f} s"
            if failure is not None or reason is not None:
                self.stop()
                raise failure or DriverOutputError(f"fleet step not started: {reason}")
            if self._event(self.signals.ready(waiting[0])).wait(POLL_S):
                waiting.pop(0)
        self.go_at = time.time()
        self._event(self.signals.go).set()

    def running(self) -> bool:
        return any(not future.done() for future in self.futures.values())

    def stop(self) -> None:
        """Tell every host to stop its load now (set both: a host still at the barrier
        sees the go, then the stop)."""
        if not self._stopped:
            self._stopped = True
            self._event(self.signals.stop).set()
            self._event(self.signals.go).set()

    def wait(self, timeout_s: float, abort: Callable[[], str | None] | None = None) -> None:
        """Until every task ended; a lost host, `abort`'s reason or the time running out
        stop the others and raise (HostLost naming the host)."""
        deadline = time.monotonic() + timeout_s
        while self.running():
            lost = self.lost()
            reason = abort() if abort is not None else None
            if lost is None and reason is None and time.monotonic() > deadline:
                reason = f"did not finish within {timeout_s:.0f} s"
            if lost is not None or reason is not None:
                self.stop()
                self._drain()
                raise lost or DriverOutputError(f"fleet step stopped: {reason}")
            time.sleep(POLL_S)

    def _drain(self) -> None:
        """After a stop: give the others STOP_WAIT_S to end, then cancel what is left."""
        deadline = time.monotonic() + STOP_WAIT_S
        while self.running() and time.monotonic() < deadline:
            time.sleep(POLL_S)
        self.fleet.client.cancel(list(self.futures.values()), force=True)

    def outcomes(self) -> dict[str, HostOutcome]:
        """Every host's outcome; DriverOutputError naming the host whose task failed."""
        failure = self.failed()
        if failure is not None:
            raise failure
        return {name: future.result() for name, future in self.futures.items()}

    def close(self) -> None:
        """Cancel what still runs; clear the step's events (the scheduler forgets them)."""
        with contextlib.suppress(Exception):
            if self.running():
                self.stop()
                self._drain()
        with contextlib.suppress(Exception):
            for name in self.signals.events([host.name for host in self.hosts]):
                self._event(name).clear()


def start_figures(outcomes: dict[str, HostOutcome], go_at: float | None) -> dict[str, Any]:
    """Per host: when its load started after the go (lag) and after the first host (skew)."""
    starts = [o.started_at for o in outcomes.values() if o.started_at is not None]
    first = min(starts, default=None)
    figures = {}
    for name, outcome in outcomes.items():
        started = outcome.started_at
        figures[name] = {
            "start_lag_ms": round((started - go_at) * 1000, 3) if started and go_at else None,
            "start_skew_ms": round((started - first) * 1000, 3) if started and first else None,
        }
    return figures


def write_raw(raw_dir: Path, outcomes: dict[str, HostOutcome]) -> None:
    """Each host's raw output under raw/<host>/ (the files its driver processes wrote)."""
    for name, outcome in outcomes.items():
        # names come from the hosts: checked to be plain names, never a way out of raw/
        host_dir = raw_dir / check_member_name(name, "load host")
        host_dir.mkdir(parents=True, exist_ok=True)
        for file_name, text in outcome.raw.items():
            (host_dir / check_file_name(file_name, f"{name}'s raw file")).write_text(text)


def host_figures(
    name: str, offered: int, outcome: HostOutcome, load_cpus: int, start: dict[str, Any]
) -> dict[str, Any]:
    """What one host measured, as kept in `figures.hosts` and raw/<label>-hosts.json."""
    result = outcome.result
    assert result is not None
    cpu_pct = (
        round(outcome.driver_cpu_s / result.duration_s * 100.0, 1)
        if outcome.driver_cpu_s is not None and result.duration_s > 0
        else None
    )
    return {
        "host": name,
        "offered": offered,
        "replies": result.replies,
        "errors": dict(result.errors),
        "achieved": round(result.rate, 1),
        "duration_s": round(result.duration_s, 3),
        "latency_ms": {
            k: (round(v, 3) if v is not None else None) for k, v in result.latency_ms.items()
        },
        "driver_cpu_pct": cpu_pct,
        "load_cpus": load_cpus,
        "driver_bound": cpu_pct is not None and cpu_pct >= DRIVER_BOUND_SHARE * 100.0 * load_cpus,
        **{
            k: v
            for k in ("requests", "bytes_read")
            if (v := getattr(result.figures, k)) is not None
        },
        **start,
    }


def merge_host_results(results: list[DriverResult], figures: list[dict[str, Any]]) -> DriverResult:
    """The hosts' results as one (exact sums; percentiles: see the module's docstring)."""
    merged = merge_results(results)
    upper_bound_ms = None
    if len(results) > 1 and merged.latency_ms["p99"] is None:  # no histograms to add
        upper_bound_ms = {
            key: max((r.latency_ms[key] for r in results if r.latency_ms[key] is not None),
                     default=None)
            for key in PERCENTILES
        }  # fmt: skip
    skews = [f["start_skew_ms"] for f in figures if f["start_skew_ms"] is not None]
    fleet_figures = dataclasses.replace(
        merged.figures,
        hosts=figures,
        latency_upper_bound_ms=upper_bound_ms,
        start_skew_ms_max=max(skews, default=None),
        driver_bound_hosts=[f["host"] for f in figures if f["driver_bound"]],
    )
    cpus = [f["driver_cpu_pct"] for f in figures if f["driver_cpu_pct"] is not None]
    return dataclasses.replace(
        merged, figures=fleet_figures, driver_cpu_pct=round(sum(cpus), 1) if cpus else None
    )


def run_fleet_step(
    fleet: Fleet,
    drivers: dict[str, Driver],
    load_cpus: dict[str, int],
    step: RampStep,
    target: Target,
    cpus: str | None,
    raw_dir: Path,
    label: str,
    abort: Callable[[], str | None] | None = None,
) -> DriverResult:
    """One concurrency or rate step across the fleet: each host runs its share of the
    connections or of the rate (hosts whose share is 0 sit out), all started together; the
    merged result.

    DriverOutputError names the host whose driver failed; HostLost a host that was lost.
    """
    names = [host.name for host in fleet.hosts]
    shares = dict(zip(names, split_evenly(int(step.offered), len(names)), strict=True))
    opened = dict(zip(names, split_evenly(step.connections or 0, len(names)), strict=True))
    hosts = [host for host in fleet.hosts if shares[host.name] > 0]

    def submit(host: LoadHost, signals: StepSignals) -> Any:
        host_step = dataclasses.replace(
            step,
            offered=float(shares[host.name]),
            connections=max(1, opened[host.name]) if step.connections else None,
        )
        return fleet.client.submit(
            run_driver_on_host, host.name, signals, drivers[host.name], host_step, target,
            cpus, label, BARRIER_TIMEOUT_S,
            key=f"{label}-{host.name}-{uuid.uuid4().hex[:8]}",
            workers=[host.address], allow_other_workers=False, retries=0, pure=False,
        )  # fmt: skip

    tasks = HostTasks(fleet, label, hosts, submit)
    try:
        tasks.start(abort)
        tasks.wait((step.duration_s or 0.0) + target.timeout_s + 60.0, abort)
        outcomes = tasks.outcomes()
    finally:
        tasks.close()
    write_raw(raw_dir, outcomes)
    failed = [(name, o.error) for name, o in outcomes.items() if o.result is None]
    if failed:
        name, error = failed[0]
        raise DriverOutputError(f"host {name}: {error}")
    starts = start_figures(outcomes, tasks.go_at)
    figures = [
        host_figures(name, shares[name], outcome, load_cpus[name], starts[name])
        for name, outcome in outcomes.items()
    ]
    (raw_dir / f"{label}-hosts.json").write_text(json.dumps(figures, indent=2) + "\n")
    return merge_host_results([o.result for o in outcomes.values() if o.result], figures)

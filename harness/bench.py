"""`harness bench`: our server against the framework's minimal hello-world, same core, same run.

Both run pinned to the server CPUs; wrk runs on the load CPUs. A round is one wrk run
against each app, back to back, the order alternating round by round (ours first, then
the minimal app first) so that drift on a noisy machine and position hit both alike. The
ratio ours / minimal is taken per round (the two runs were seconds apart: drift cancels)
and its 95 % interval is the t interval on the log ratios (harness.stats). Rounds go on
past `rounds` (the minimum) until that interval's half-width is within `precision_pct` %
of the ratio, `max_rounds` have run, or the next round would end past `max_time_s`
(harness.run.precision's rules). The rounds measure the same two processes: the interval
covers their run-to-run spread, not how each settles at another start. A plugin's or a
command's server is measured against its own `minimal_command`. With a `profile_dir`
(`--cpu-profile`), one more run of each app, sampled, after the rounds and out of the
ratio (harness.bench_profile).

On a protocol other than h1 both apps speak it: our server, and a minimal command whose
placeholders carry it (harness.frameworks.command_protocols); the builtin minimal apps
(servers/minimal) speak h1 only, so `bench_unsupported` says why a bench cannot run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drivers.base import Target, run_step
from drivers.processes import kill_group, spawn
from drivers.wrk import WrkDriver
from harness.bench_live import BenchWatch, app_run
from harness.bench_profile import profile_apps
from harness.frameworks import command_protocols
from harness.run.precision import imprecise_reason, round_fits
from harness.server_process import protocol_unsupported, start_command_server, start_server
from harness.services.base import wait_listening
from harness.stats import Interval, paired_ratio_interval
from harness.tls import Certificates
from model.errors import UserError
from model.ramps import RampStep
from model.scenarios import SCENARIOS
from servers import FRAMEWORKS, scratch
from servers.contract import PROTOCOL_H1

if TYPE_CHECKING:
    from harness.server_process import ServerProcess

BENCH_MIN_ROUNDS = 10
BENCH_PRECISION_PCT = 3.0
BENCH_MAX_ROUNDS = 60
BENCH_MAX_TIME_S = 240.0


@dataclass(frozen=True)
class BenchResult:
    """Our server against the framework's minimal app: the rounds' mean req/s of each, the
    paired ratio with its 95 % interval, and whether it reached the precision asked."""

    framework: str
    loop: str | None
    ours_requests_per_s: float
    minimal_requests_per_s: float
    rounds: int
    ratio: float
    ratio_ci: tuple[float, float] | None  # 95 %, from the paired rounds
    precision_pct: float | None = None
    imprecise_reason: str | None = None  # None: within the precision (or none asked)
    protocol: str = PROTOCOL_H1
    # each round's req/s, in round order (round i: ours_per_round[i], minimal_per_round[i])
    ours_per_round: tuple[float, ...] = ()
    minimal_per_round: tuple[float, ...] = ()
    # --cpu-profile: each app's sampled run (harness.bench_profile), by app
    cpu_profile: dict[str, dict[str, Any]] | None = None

    @property
    def half_width_pct(self) -> float | None:
        """The ratio interval's half-width in % of the ratio."""
        if self.ratio_ci is None:
            return None
        return 100.0 * (self.ratio_ci[1] - self.ratio_ci[0]) / 2 / self.ratio


def ratio_half_width_pct(interval: Interval | None) -> float | None:
    """A ratio interval's half-width in % of the ratio; None without an interval."""
    if interval is None or interval.value <= 0:
        return None
    return 100.0 * (interval.high - interval.low) / 2 / interval.value


def bench_summary(
    framework: str,
    loop: str | None,
    ours: list[float],
    minimal: list[float],
    precision_pct: float | None,
) -> BenchResult:
    """The bench's figures from its paired rounds (`ours[i]` and `minimal[i]` ran in round
    i): means, the paired ratio and its interval, imprecise when wider than asked."""
    interval = paired_ratio_interval(ours, minimal)
    ratio = interval.value if interval else statistics.fmean(ours) / statistics.fmean(minimal)
    width = ratio_half_width_pct(interval)
    short = precision_pct is not None and (width is None or width > precision_pct)
    return BenchResult(
        framework,
        loop,
        statistics.fmean(ours),
        statistics.fmean(minimal),
        len(ours),
        ratio,
        interval.rounded(4).as_pair() if interval else None,
        precision_pct,
        imprecise_reason(width, len(ours), precision_pct) if short and precision_pct else None,
        ours_per_round=tuple(round(value, 1) for value in ours),
        minimal_per_round=tuple(round(value, 1) for value in minimal),
    )


def bench_continues(
    ours: list[float],
    minimal: list[float],
    *,
    min_rounds: int,
    max_rounds: int,
    precision_pct: float | None,
    elapsed_s: float,
    round_s: float,
    max_time_s: float | None,
) -> bool:
    """Whether another round runs: always up to `min_rounds`; then, with a precision, while
    the ratio's half-width is wider, fewer than `max_rounds` ran and a round of `round_s`
    ends within `max_time_s` of the start."""
    done = len(ours)
    if done < min_rounds:
        return True
    if not precision_pct or done >= max_rounds:
        return False
    width = ratio_half_width_pct(paired_ratio_interval(ours, minimal))
    if width is not None and width <= precision_pct:
        return False
    return round_fits(elapsed_s=elapsed_s, round_cost_s=round_s, budget_s=max_time_s)


def bench_unsupported(framework: str, protocol: str) -> str | None:
    """Why `framework` cannot be benched on `protocol` (its server or its minimal app does
    not speak it), or None."""
    info = FRAMEWORKS[framework]
    why = protocol_unsupported(info, protocol)
    if why is not None or protocol == PROTOCOL_H1:
        return why
    if not info.minimal_command:
        return f"{framework}'s minimal app (servers/minimal) speaks h1 only"
    spoken, notes = command_protocols(f"{framework}'s minimal", info.minimal_command)
    return None if protocol in spoken else notes[protocol]


@contextlib.contextmanager
def minimal_app(
    framework: str,
    server_cpus: str,
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
) -> Iterator[tuple[int, int]]:
    """The framework's minimal app, pinned to `server_cpus`, running; yields its port and
    its process id.

    A builtin framework's is servers/minimal (port 0, read back from the app's own
    listening socket); a plugin's or a command's is its `minimal_command`, started as a
    command server (a free port the harness picked, checked to be the app's own), on
    `protocol`.
    """
    info = FRAMEWORKS[framework]
    if info.minimal_command:
        with start_command_server(
            info, info.minimal_command, cpus=server_cpus, protocol=protocol,
            certificates=certificates,
        ) as app:  # fmt: skip
            yield app.port, app.pid
        return
    if protocol != PROTOCOL_H1:
        raise UserError(
            f"bench {framework} on {protocol}: {bench_unsupported(framework, protocol)}"
        )
    minimal = spawn(
        [
            "taskset",
            "-c",
            server_cpus,
            sys.executable,
            "-m",
            "servers.minimal",
            framework,
            "--port",
            "0",  # the OS chooses; read back from the app's own listening socket
        ],
        death_signal=signal.SIGTERM,
    )
    try:
        yield wait_listening(minimal, f"the minimal {framework} app"), minimal.pid
    finally:
        minimal.terminate()
        try:
            minimal.wait(5)
        except subprocess.TimeoutExpired:
            pass
        finally:  # whatever interrupts the wait, the app and what it forked end here
            kill_group(minimal)
            minimal.wait()


def bench_framework(
    framework: str,
    *,
    loop: str | None = None,
    server_cpus: str = "0",
    load_cpus: str = "1",
    connections: int = 100,
    duration_s: float = 3.0,
    rounds: int = BENCH_MIN_ROUNDS,
    precision_pct: float | None = BENCH_PRECISION_PCT,
    max_rounds: int = BENCH_MAX_ROUNDS,
    max_time_s: float | None = BENCH_MAX_TIME_S,
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
    watch: BenchWatch | None = None,
    profile_dir: Path | None = None,
) -> BenchResult:
    """Interleaved wrk runs against our server and the minimal app, both on `protocol`
    (TLS: serving `certificates`), the order alternating, until the paired ratio is
    within `precision_pct` % (module docstring); each run and round told to `watch`;
    then, with `profile_dir`, each app sampled through one more run."""
    started = time.monotonic()
    with (
        minimal_app(framework, server_cpus, protocol, certificates) as (port, minimal_pid),
        start_server(
            framework, loop=loop, cpus=server_cpus, protocol=protocol, certificates=certificates
        ) as ours,
        scratch.temporary_directory("bench") as raw_dir,
    ):
        text = SCENARIOS["text"]
        ca_path = certificates.ca_path if certificates is not None else None
        targets = {
            name: Target("127.0.0.1", target_port, text, protocol=protocol, ca_path=ca_path)
            for name, target_port in (("ours", ours.port), ("minimal", port))
        }
        driver = WrkDriver(threads=1)
        warm_up = RampStep(0, connections, "concurrency", duration_s=2)
        step = RampStep(0, connections, "concurrency", duration_s=duration_s)
        for name, target in targets.items():
            run_step(driver, warm_up, target, load_cpus, Path(raw_dir), f"warm-{name}")
        measured: dict[str, list[float]] = {"ours": [], "minimal": []}
        round_s = 2 * duration_s  # until a round has run: its load alone
        while bench_continues(
            measured["ours"],
            measured["minimal"],
            min_rounds=rounds,
            max_rounds=max_rounds,
            precision_pct=precision_pct,
            elapsed_s=time.monotonic() - started,
            round_s=round_s,
            max_time_s=max_time_s,
        ):
            round_index = len(measured["ours"])
            began = time.monotonic()
            order = list(targets) if round_index % 2 == 0 else list(reversed(targets))
            for name in order:
                sampled = _sampled(ours, minimal_pid, name) if watch is not None else None
                with app_run(watch, name, round_index, steps=1, sampled=sampled):
                    if watch is not None:
                        watch.step_started(0, connections, step.unit)
                    label = f"{name}-{round_index}"
                    result = run_step(driver, step, targets[name], load_cpus, Path(raw_dir), label)
                    if watch is not None:
                        watch.load_finished(
                            step.offered, step.unit, result.rate, result.replies,
                            result.errors, result.latency_ms,
                        )  # fmt: skip
                    if result.errors_total:
                        raise UserError(f"{framework} {name}: wrk saw errors {result.errors}")
                measured[name].append(result.rate)
            if watch is not None:
                watch.round_finished("req_per_s", measured["ours"], measured["minimal"])
            round_s = time.monotonic() - began
        pids = {"ours": ours.pid, "minimal": minimal_pid}
        apps = {name: (pids[name], target) for name, target in targets.items()}
        profiles = profile_dir and profile_apps(
            framework, apps, driver, step, load_cpus, Path(raw_dir), profile_dir
        )
    result = bench_summary(framework, loop, measured["ours"], measured["minimal"], precision_pct)
    return dataclasses.replace(result, protocol=protocol, cpu_profile=profiles or None)


def _sampled(ours: ServerProcess, minimal_pid: int, app: str) -> tuple[list[int], Any]:
    """What the live page's monitor samples of `app`: its process (and children) and its
    telemetry (the minimal app has none)."""
    if app == "ours":
        return [ours.pid], ours.latest_telemetry
    return [minimal_pid], dict

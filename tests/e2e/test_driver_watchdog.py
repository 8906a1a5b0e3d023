"""A hung load generator costs nothing: the watchdog stops a driver that
outlives its step with the signal on which it reports, reads what it printed then as the
step's figures, and kills only a driver deaf to that signal; a step left with no figures
is retried once, and a case with a hole says so.

siege's own end-of-run hang comes now and then, so these tests make the overrun happen on
purpose: a real siege told to run far longer than its step, a real process that ignores
the signal. The stress test runs many short siege steps through the whole harness.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from drivers.base import (
    CLOSED_CONNECTIONS,
    OVERRUN_MARGIN_S,
    STOP_GRACE_S,
    DriverOutputError,
    DriverResult,
    Target,
    no_latency,
    run_step,
)
from drivers.h2load import H2loadDriver
from drivers.siege import SiegeDriver
from harness.server_process import start_server
from harness.tls import make_certificates
from model.ramps import Ramp, RampStep
from model.scenarios import SCENARIOS
from tests.e2e.test_backends_and_topologies import compare, ok_cases
from tests.helpers import require_framework, require_tools


class OverlongSiege(SiegeDriver):
    """siege asked for `real_s` seconds where the step is 1 s: an overrun on demand."""

    def __init__(self, real_s: int) -> None:
        super().__init__()
        self.real_s = real_s

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        [command] = super().commands(step, target, workdir)
        return [[f"-t{self.real_s}S" if arg.startswith("-t") else arg for arg in command]]


class DeafDriver:
    """A process that ignores SIGINT and sleeps past its step (a hang no signal ends)."""

    name = "deaf"
    tool = "python"
    package = None
    tool_version_args = ()
    ramp_kinds = ("concurrency",)
    protocols = ("h1",)
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = False

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: object) -> DeafDriver:
        return cls()

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        script = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"
        return [[sys.executable, "-c", script]]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return DriverResult(replies=1, duration_s=1.0, errors={}, latency_ms=no_latency())


def test_an_overrunning_siege_is_stopped_by_sigint_and_its_totals_are_the_figures(
    tmp_path: Path,
) -> None:
    require_tools("siege")
    step = RampStep(0, offered=5, unit="concurrency", duration_s=1)
    with start_server("nginx") as server:
        target = Target("127.0.0.1", server.port, SCENARIOS["text"], timeout_s=1.0)
        started = time.monotonic()
        result = run_step(OverlongSiege(real_s=60), step, target, None, tmp_path, "step000")
        took_s = time.monotonic() - started
    signalled_after_s = 1 + 1.0 + OVERRUN_MARGIN_S
    assert took_s < signalled_after_s + STOP_GRACE_S, "siege was not stopped at its deadline"
    assert result.figures.stopped_by == "SIGINT"
    # it overran its 1 s step by the margin (and the time it took to answer the signal)
    assert 1.0 + OVERRUN_MARGIN_S <= result.figures.overran_s < 1.0 + OVERRUN_MARGIN_S + 5
    assert result.replies > 0 and result.errors_total == 0
    # the duration is the one siege measured up to the signal, not the step's 1 s
    assert signalled_after_s - 1 <= result.duration_s <= took_s + 0.5
    assert result.figures.megabytes_per_s is not None
    raw = (tmp_path / "step000-0.txt").read_text()
    assert '"transactions"' in raw


def test_a_driver_deaf_to_its_signal_is_killed_after_the_grace(tmp_path: Path) -> None:
    step = RampStep(0, offered=1, unit="concurrency", duration_s=1)
    target = Target("127.0.0.1", 9, SCENARIOS["text"], timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(DriverOutputError, match=r"did not stop within 5 s of SIGINT"):
        run_step(DeafDriver(), step, target, None, tmp_path, "step000")  # type: ignore[arg-type]
    took_s = time.monotonic() - started
    # killed once the grace after the signal ran out: not at the 60 s it would sleep
    assert 1 + 1.0 + OVERRUN_MARGIN_S + STOP_GRACE_S <= took_s < 30


# 10 steps by default (~12 s); -m slow runs 50 (~60 s), the stress that found the hang
@pytest.mark.parametrize("step_count", [10, pytest.param(50, marks=pytest.mark.slow)])
def test_many_short_siege_steps_lose_none(tmp_path: Path, step_count: int) -> None:
    """Consecutive 1 s siege steps of random files (the autobench study's shape, the one
    that hung in CI): every step has figures, none lost, the case a plain ok."""
    require_framework("gevent")
    require_tools("siege")
    run = compare(
        tmp_path, "--frameworks", "gevent", "--scenario", "files", "--driver", "siege",
        "--set", "file_count=100", "--set", "ramp.start=2", "--set", f"ramp.stop={2 * step_count}",
        "--set", "ramp.step=2", "--set", "ramp.duration_s=1", "--set", "rounds=0",
        "--set", "warmup_s=0", "--set", "cooldown_s=0",
        timeout_s=900,
    )  # fmt: skip
    [case] = ok_cases(run)
    steps = case["steps"]
    assert len(steps) == step_count
    lost = [s["offered"] for s in steps if "step_lost" in s["flags"]]
    assert not lost, f"steps lost at {lost}"
    assert all(s["replies"] > 0 and "megabytes_per_s" in s["figures"] for s in steps), [
        (s["offered"], s["figures"].get("driver_error")) for s in steps if not s["replies"]
    ]
    # what the watchdog and the retry did, if anything, is in the run, never silent
    overruns = [s["figures"]["overran_s"] for s in steps if "overran_s" in s["figures"]]
    retried = [s["figures"]["retried"] for s in steps if "retried" in s["figures"]]
    print(json.dumps({"overruns_s": overruns, "retried": retried}))


class LateConnectionProxy:
    """A TCP proxy to `upstream_port` on loopback that holds its `late`-th connection for
    `delay_s` before passing any byte: that client's TLS handshake ends after the step."""

    def __init__(self, upstream_port: int, late: int, delay_s: float) -> None:
        self.upstream_port = upstream_port
        self.late = late
        self.delay_s = delay_s
        self.accepted = 0
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self.port = self.server.sockets[0].getsockname()[1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.accepted == self.late:
            await asyncio.sleep(self.delay_s)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while chunk := await source.read(65536):
                    sink.write(chunk)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def test_h2load_with_a_client_connected_after_its_duration_is_stopped_with_its_totals(
    tmp_path: Path,
) -> None:
    """h2load 1.52 never stops a client whose TLS handshake ends after its main duration
    (it runs on, requesting): the watchdog closes its connections, h2load ends and prints
    its totals, which count the main duration only."""
    require_tools("h2load", "nginx")
    certificates = make_certificates(tmp_path / "tls")
    step = RampStep(0, offered=2, unit="concurrency", duration_s=1)
    with start_server("nginx", protocol="h2", certificates=certificates) as server:
        proxy = LateConnectionProxy(server.port, late=2, delay_s=2.5)
        try:
            target = Target(
                "127.0.0.1", proxy.port, SCENARIOS["text"], timeout_s=1.0, protocol="h2"
            )
            started = time.monotonic()
            result = run_step(H2loadDriver(), step, target, None, tmp_path, "step000")
            took_s = time.monotonic() - started
        finally:
            proxy.close()
    assert result.figures.stopped_by == CLOSED_CONNECTIONS
    assert took_s < 1 + 1.0 + OVERRUN_MARGIN_S + STOP_GRACE_S
    assert result.replies > 0 and result.duration_s == 1.0  # h2load's main duration
    assert result.rate == pytest.approx(result.replies)

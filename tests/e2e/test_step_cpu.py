"""A step's server CPU is exact over its window: read from the server's
clocks at the step's two ends, not the mean of the 1 s samples that overlap its edges.

tests/spin_server.py does a fixed amount of CPU work per request (about 1 ms here), so ten
or twenty wrk connections keep its one process busy for the whole of each 2 s step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from drivers.base import DriverResult, Target, no_latency, run_step
from model.ramps import RampStep
from model.results import read_run
from model.scenarios import SCENARIOS
from tests.e2e.test_driver_watchdog import DeafDriver
from tests.e2e.test_precision import SPIN_SERVER, iterations_costing
from tests.helpers import harness, require_tools

pytestmark = pytest.mark.serial  # reads a saturated server's CPU share


def test_a_server_saturated_for_a_two_second_step_reads_at_least_90_percent(
    tmp_path: Path,
) -> None:
    require_tools("wrk")
    iterations = iterations_costing(1000)  # ~1 ms of CPU per request
    command = (
        f"spin={sys.executable} {SPIN_SERVER} --host {{host}} --port {{port}} --spin {iterations}"
    )
    done = harness(
        "run", "--framework", "spin", "--server", command, "--profile", "smoke",
        "--set", "ramp.start=10", "--set", "ramp.stop=10", "--set", "ramp.duration_s=2",
        "--set", "warmup_s=0", "--set", "cooldown_s=1",
        "--precision", "0", "--no-verify", "--out", str(tmp_path), timeout_s=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = tmp_path.iterdir()
    (case,) = read_run(run_dir).cases
    # the step follows an idle second (no warm-up, a 1 s cool-down): the samples' mean
    # counted part of it
    assert len(case.steps) == 1
    if any("contended" in step.flags for step in case.steps):  # others held its CPU
        pytest.skip(f"other processes used the server's CPU: {[s.figures for s in case.steps]}")
    for step in case.steps:
        assert step.server_cpu_pct is not None and step.server_cpu_pct >= 90.0, step
        assert step.bottleneck == "server"


class SlowParse(DeafDriver):
    """A load generator whose output takes long to read (h2load's log of 300,000 requests
    took ~0.5 s): its step's window must close when the process ends, not after parsing."""

    name = "slowparse"

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        return [[sys.executable, "-c", "print('done')"]]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        self.events.append("parse")
        return DriverResult(replies=1, duration_s=1.0, errors={}, latency_ms=no_latency())


def test_a_steps_window_closes_when_its_load_ends_before_the_output_is_read(
    tmp_path: Path,
) -> None:
    events: list[str] = []
    step = RampStep(0, offered=1, unit="concurrency", duration_s=1)
    target = Target("127.0.0.1", 9, SCENARIOS["text"], timeout_s=1.0)
    run_step(
        SlowParse(events),  # type: ignore[arg-type]
        step, target, None, tmp_path, "step000",
        on_end=lambda: events.append("window closed"),
    )  # fmt: skip
    assert events == ["window closed", "parse"]

"""Noise, named: a CPU burner on the server's CPU during a step flags it `contended`; each
step names its bottleneck and the harness's own CPU (real server, real wrk)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.compare import build_plan
from harness.run import Runner, SilentReporter
from harness.run_options import RunOptions
from model.results import BOTTLENECKS, Step
from tests.helpers import require_framework, require_tools

pytestmark = pytest.mark.serial  # a burner on the server CPU: no other load beside it

BURN_S = 10.0  # the burner's own bound; it is killed when its step ends
BUSY_LOOP = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def start_burner(cpu: int) -> int:
    """A busy loop pinned to `cpu` that is not a descendant of this process (the harness
    takes its own descendants for its own work): a shell starts it in the background and
    exits, so it is re-parented. Its pid."""
    started = subprocess.run(
        ["sh", "-c", 'taskset -c "$0" "$1" -c "$2" >/dev/null 2>&1 & echo $!', str(cpu),
         sys.executable, BUSY_LOOP.format(s=BURN_S)],
        capture_output=True, text=True, check=True, timeout=10,
    )  # fmt: skip
    return int(started.stdout)


def stop_burner(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # its new parent reaps it
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return
        time.sleep(0.01)


class BurnFirstStep(SilentReporter):
    """Burns the server's CPU during step 0 only, and measures the burner: its CPU share
    over the step (its CPU seconds / the time from the step's start to its end, which
    holds the monitor's window). Notes where the harness ran meanwhile."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.burner: int | None = None
        self.started = 0.0
        self.burner_pct = 0.0
        self.harness_cpus: set[int] = set()

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        self.harness_cpus = os.sched_getaffinity(0)
        if index == 0:
            self.started = time.monotonic()
            self.burner = start_burner(self.cpu)

    def step_finished(self, *, step: Step) -> None:
        if self.burner is not None:
            times = psutil.Process(self.burner).cpu_times()
            elapsed_s = time.monotonic() - self.started
            self.burner_pct = 100.0 * (times.user + times.system) / elapsed_s
        self.stop()

    def stop(self) -> None:
        if self.burner is not None:
            stop_burner(self.burner)
            self.burner = None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a server CPU and a load CPU")
def test_a_burner_on_the_server_cpu_flags_its_step_contended(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={"warmup_s": 0},  # two 2 s steps
            results_dir=tmp_path,
            verify=False,  # the burner's step is what is read
        )
    )
    reporter = BurnFirstStep(int(plan.server_cpus))
    try:
        run = Runner(plan, reporter).run()
    finally:
        reporter.stop()
    [case] = run.cases
    assert case.status == "ok", case.error
    burned, after = case.steps
    others = burned.figures.other_cpu_pct["server"]
    print(
        f"burner {reporter.burner_pct:.1f} % of a core; other_cpu_pct: burned step",
        burned.figures.other_cpu_pct, "next step", after.figures.other_cpu_pct,
        "; harness_cpu_pct", burned.figures.harness_cpu_pct, after.figures.harness_cpu_pct,
    )  # fmt: skip
    # everything the burner used on the server's CPU is someone else's (its share is
    # taken over a little more than the window: a lower bound), less 5 % for rounding
    assert others >= reporter.burner_pct - 5.0
    assert "contended" in burned.flags
    # The next step is not asserted quiet: on a shared machine other processes use the
    # CPUs too (its figure is printed above).
    for step in case.steps:
        assert step.bottleneck in BOTTLENECKS
        assert 0.0 <= step.figures.harness_cpu_pct < 100.0
    assert reporter.harness_cpus == {int(plan.load_cpus)}  # the observer on the load CPU
    assert os.sched_getaffinity(0) != reporter.harness_cpus  # and free again after the run

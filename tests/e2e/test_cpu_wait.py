"""The monitor sees a process wait for its CPU: two busy loops pinned to one CPU each wait
about half the time, which `cpu_contended` turns into a step flag."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.monitor import Monitor, run_delay_ns

pytestmark = pytest.mark.serial  # busy loops pinned to one CPU, their wait read

BUSY = "import time\nend = time.monotonic() + 5\nwhile time.monotonic() < end: pass\n"


def test_two_busy_processes_on_one_cpu_wait_for_it() -> None:
    cpu = str(sorted(os.sched_getaffinity(0))[-1])
    loops = [subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", BUSY]) for _ in range(2)]
    monitor = Monitor(lambda: {})
    try:
        monitor.set_agent_pids([p.pid for p in loops])
        time.sleep(0.3)  # taskset has exec'd python by now
        monitor.set_agent_pids([p.pid for p in loops])
        monitor.sample()  # a baseline
        time.sleep(1.5)
        row = monitor.sample()
        delays = [run_delay_ns(p.pid) for p in loops]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    print(
        f"two loops on CPU {cpu}: {row['agent_cpu_pct']} % CPU, {row['agent_cpu_wait_pct']} % wait"
    )
    assert all(delay > 0 for delay in delays)
    # a busy loop is always running or waiting to run: two make ~200 % of a core in all,
    # and with two on one core at least half of that is waiting (other processes add)
    assert row["agent_cpu_pct"] + row["agent_cpu_wait_pct"] == pytest.approx(200.0, abs=40.0)
    assert row["agent_cpu_wait_pct"] >= 80.0

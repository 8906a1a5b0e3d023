"""Reading back what taskset did, and the harness pinning itself (parsing CPU lists:
tests/unit/test_cpu_lists.py)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from drivers.processes import kill_group, spawn
from harness.affinity import cpus_allowed, format_cpu_list, harness_pinned


def test_cpus_allowed_reads_back_taskset() -> None:
    cpu = min(os.sched_getaffinity(0))
    child = subprocess.Popen(["taskset", "-c", str(cpu), "sleep", "5"])
    try:
        for _ in range(100):  # until taskset has exec'd sleep
            if Path(f"/proc/{child.pid}/comm").read_text().strip() == "sleep":
                break
            time.sleep(0.01)
        assert cpus_allowed(child.pid) == str(cpu)
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_the_harness_pins_its_threads_to_the_load_cpus_but_not_its_children() -> None:
    before = os.sched_getaffinity(0)
    load = max(before)
    stop = threading.Event()
    earlier = threading.Thread(target=stop.wait, args=(10,), name="earlier")  # like rich's
    earlier.start()
    seen: dict[str, set[int]] = {}
    try:
        with harness_pinned(str(load)):
            assert os.sched_getaffinity(0) == {load}
            assert os.sched_getaffinity(earlier.native_id or 0) == {load}
            later = threading.Thread(target=lambda: seen.update(later=os.sched_getaffinity(0)))
            later.start()
            later.join()
            assert seen["later"] == {load}  # the monitor and the probe start like this
            child = spawn(["sleep", "5"])  # an unpinned server or load generator
            try:
                assert cpus_allowed(child.pid) == format_cpu_list(sorted(before))
            finally:
                kill_group(child)
                child.wait()
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(earlier.native_id or 0) == before
    finally:
        stop.set()
        earlier.join()

"""Reading back what taskset did (parsing CPU lists: tests/unit/test_cpu_lists.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from harness.affinity import cpus_allowed


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

"""CPU lists: parsing, refusing CPUs this machine lacks, reading back what taskset did."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.affinity import cpus_allowed, format_cpu_list, parse_cpu_list
from model.errors import UserError


def test_parse_and_format_round_trip() -> None:
    assert parse_cpu_list("0") == [0]
    assert format_cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


@pytest.mark.parametrize("spec", ["x", "1-0", "", "0,,1"])
def test_malformed_cpu_list_is_a_user_error(spec: str) -> None:
    with pytest.raises(UserError, match="is not like"):
        parse_cpu_list(spec)


def test_cpu_the_machine_lacks_is_named() -> None:
    with pytest.raises(UserError, match="CPU 4096 is not available here"):
        parse_cpu_list("4096")


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

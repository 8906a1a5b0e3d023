"""CPU lists for `taskset -c`: parsing, checking against this machine, reading them back."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from drivers.processes import child_cpus, set_child_cpus
from model.errors import UserError


def parse_cpu_list(spec: str) -> list[int]:
    """`0`, `1-3`, `0,2-3` → sorted CPU numbers; a CPU this machine lacks is a UserError."""
    cpus: set[int] = set()
    try:
        for part in spec.split(","):
            first, _, last = part.strip().partition("-")
            low, high = int(first), int(last or first)
            if low > high:
                raise ValueError
            cpus.update(range(low, high + 1))
    except ValueError:
        raise UserError(f"CPU list {spec!r} is not like 0 or 1-3 or 0,2-3") from None
    allowed = unpinned_cpus()  # not the load's CPUs the harness itself may be pinned to
    absent = sorted(cpus - allowed)
    if absent:
        raise UserError(
            f"CPU {','.join(map(str, absent))} is not available here "
            f"(this machine offers {format_cpu_list(sorted(allowed))})"
        )
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2,5' (the form taskset and /proc use)."""
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and cpu == int(ranges[-1].split("-")[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def cpus_allowed(pid: int) -> str | None:
    """The Cpus_allowed_list the kernel holds for `pid` (what taskset really did)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _pin_threads(cpus: frozenset[int]) -> None:
    """Every thread of this process on `cpus` (sched_setaffinity is per thread on Linux)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def harness_pinned(cpus: str) -> Iterator[None]:
    """The harness on the load's CPUs `cpus` for the block, so the observer stays off the
    server's CPUs: every thread (the progress display's among them), and the threads
    started meanwhile (the monitor, the probe), which inherit it. The children it starts
    meanwhile get back the CPUs it had (drivers.processes.child_setup): a server or a load
    generator that the affinity mode leaves unpinned stays unpinned. Restored after.
    """
    before = frozenset(os.sched_getaffinity(0))
    wanted = frozenset(parse_cpu_list(cpus)) & before
    if not wanted or wanted == before:  # nothing to narrow (a one-CPU machine)
        yield
        return
    set_child_cpus(before)
    _pin_threads(wanted)
    try:
        yield
    finally:
        _pin_threads(before)
        set_child_cpus(None)


def unpinned_cpus() -> frozenset[int]:
    """The CPUs a process the harness starts may use unless pinned (while the harness
    itself is pinned: those it had before)."""
    return child_cpus() or frozenset(os.sched_getaffinity(0))

"""What the monitor reads from the kernel: each CPU's busy time and the CPU clocks of
every process the harness started (`read_cpu_snapshot`), a process's CPU wait
(`run_delay_ns`: schedstat), and the host's TCP sockets and conntrack entries
(`host_socket_readings`). Each read is O(1) in the connections; the parsers are pure."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SOCKSTAT_PATH = Path("/proc/net/sockstat")  # this network namespace's sockets
CONNTRACK_COUNT_PATH = Path("/proc/sys/net/netfilter/nf_conntrack_count")


@dataclass(frozen=True)
class ProcessClock:
    """One process's CPU seconds (user + system, its reaped children's included) and the
    CPUs it may run on."""

    cpu_s: float
    cpus: frozenset[int]


@dataclass(frozen=True)
class CpuSnapshot:
    """The CPU clocks at one moment: what each CPU has spent busy, and what the processes
    the harness knows have spent (all since they started)."""

    t: float  # time.monotonic()
    busy_s: dict[int, float]  # CPU number → busy seconds since boot (parse_proc_stat)
    harness_s: float  # the harness process's own threads: main, monitor, probe, progress
    harness_cpus: frozenset[int]
    reaped_s: float  # its children that ended and were reaped (a step's load generators)
    descendants: dict[int, ProcessClock]  # every live process it started, and theirs


# /proc/stat's per-CPU columns: user nice system idle iowait irq softirq steal guest guest_nice
PROC_STAT_BUSY_COLUMNS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (guest is in user)


def parse_sockstat(text: str) -> dict[str, int]:
    """/proc/net/sockstat's TCP line as numbers: `inuse` (sockets), `orphan`, `tw`,
    `alloc` and `mem` (pages of TCP buffers); empty without one."""
    for line in text.splitlines():
        if line.startswith("TCP:"):
            fields = line.split()[1:]
            return {fields[i]: int(fields[i + 1]) for i in range(0, len(fields) - 1, 2)}
    return {}


def host_socket_readings() -> dict[str, int]:
    """This namespace's TCP sockets in use, their buffers in bytes and conntrack's entries
    (absent where the module is not loaded): O(1) reads, whatever the connections."""
    readings: dict[str, int] = {}
    try:
        tcp = parse_sockstat(SOCKSTAT_PATH.read_text())
    except OSError:
        tcp = {}
    if "inuse" in tcp:
        readings["tcp_inuse"] = tcp["inuse"]
    if "mem" in tcp:
        readings["tcp_buffer_bytes"] = tcp["mem"] * PAGE_BYTES
    with contextlib.suppress(OSError, ValueError):  # no conntrack module: not counted
        readings["conntrack_count"] = int(CONNTRACK_COUNT_PATH.read_text())
    return readings


def parse_proc_stat(text: str, ticks_per_s: float) -> dict[int, float]:
    """Each CPU's busy seconds since boot from /proc/stat's `cpuN` lines.

    Busy is user + nice + system + irq + softirq: without IRQ time accounting (this
    kernel's tick accounting) a tick in interrupt context is also charged to the task it
    interrupted, so leaving irq and softirq out would make the harness's own processes
    look larger than the CPUs' busy time. Idle, iowait and steal (the hypervisor's) are
    not busy.
    """
    busy: dict[int, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        columns = [int(v) for v in rest.split()]
        busy[int(name[3:])] = sum(columns[i] for i in PROC_STAT_BUSY_COLUMNS) / ticks_per_s
    return busy


def _process_clock(process: psutil.Process) -> ProcessClock:
    times = process.cpu_times()
    cpu_s = times.user + times.system + times.children_user + times.children_system
    return ProcessClock(cpu_s, frozenset(process.cpu_affinity() or ()))


def read_cpu_snapshot() -> CpuSnapshot:
    """The CPU clocks now: /proc/stat, this process and everything it started."""
    me = psutil.Process()
    times = me.cpu_times()
    descendants: dict[int, ProcessClock] = {}
    for child in me.children(recursive=True):
        try:
            descendants[child.pid] = _process_clock(child)
        except psutil.Error:  # it ended meanwhile: its parent's reaped time has it
            continue
    return CpuSnapshot(
        t=time.monotonic(),
        busy_s=parse_proc_stat(Path("/proc/stat").read_text(), os.sysconf("SC_CLK_TCK")),
        harness_s=times.user + times.system,
        harness_cpus=frozenset(os.sched_getaffinity(0)),
        reaped_s=times.children_user + times.children_system,
        descendants=descendants,
    )


def run_delay_ns(pid: int) -> int:
    """Nanoseconds the process's threads have spent runnable but waiting for a CPU (the
    kernel's /proc/<pid>/task/<tid>/schedstat, second field); 0 when unreadable."""
    total = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total

"""The kernel's cgroup files read as figures: pure functions of their text, no /sys.

A reading (`CgroupReading`) is what one cgroup has counted since it was made: CPU time,
CFS throttling, memory now and at its peak, OOM kills. cgroup v1 spreads it over the
`cpuacct`, `cpu` and `memory` hierarchies (`reading_v1`); v2 keeps it in one directory
(`reading_v2`). Where the processes' sockets' kernel memory is counted differs too
(SOCKET_MEMORY): v2's `memory.current` includes it (`memory.stat` `sock`); v1 keeps TCP
buffers apart in `memory.kmem.tcp.*`, counted once its limit has been written, and the
reading adds them in.

Also here: /proc/self/cgroup and /proc/self/mountinfo (where each hierarchy is mounted and
which cgroup this process is in), and memory sizes as a user writes them (`512M`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CgroupMode = str  # "v1", "v2" or "none"
CGROUP_MODES = ("v1", "v2", "none")
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
V2_CONTROLLERS = ("cpu", "cpuset", "memory")
# where a reading's memory includes the sockets' kernel memory, in words (docs/results.md)
SOCKET_MEMORY = {
    "v1": "counted: memory.usage_in_bytes + memory.kmem.tcp.usage_in_bytes (TCP buffers)",
    "v2": "counted: memory.current includes socket buffers (memory.stat sock)",
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
V2_UNLIMITED = "max"


@dataclass(frozen=True)
class CgroupReading:
    """What a cgroup has counted since it was made (every process that ever ran in it)."""

    cpu_s: float  # user + system CPU seconds
    throttled_periods: int = 0  # CFS periods in which the group was held back by its quota
    periods: int = 0  # CFS periods with runnable tasks (0 without a quota)
    throttled_s: float = 0.0  # time its tasks were held back
    memory_bytes: int | None = None  # now (v1: with the TCP buffers)
    memory_peak_bytes: int | None = None  # the most it held (v1: with the TCP buffers' peak)
    oom_kills: int = 0  # processes the kernel killed for the group's memory limit

    def __post_init__(self) -> None:
        if self.cpu_s < 0 or self.throttled_s < 0:
            raise ValueError(f"CPU and throttled time must be >= 0 ({self})")
        for name in ("throttled_periods", "periods", "oom_kills"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, not {getattr(self, name)}")


def parse_keyed(text: str) -> dict[str, int]:
    """`key value` lines (cpu.stat, memory.stat, memory.oom_control, memory.events) as a
    dict; lines that are not a key and an integer are skipped."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def parse_single(text: str) -> int | None:
    """A one-number file (cpuacct.usage, memory.max_usage_in_bytes, memory.peak); None for
    v2's `max` or an empty file."""
    value = text.strip()
    return int(value) if value.lstrip("-").isdigit() else None


def reading_v1(
    *,
    cpuacct_usage: str,
    cpu_stat: str,
    memory_usage: str,
    memory_max_usage: str,
    oom_control: str,
    tcp_usage: str = "",
    tcp_max_usage: str = "",
) -> CgroupReading:
    """A v1 reading from its files' text: cpuacct.usage (ns), cpu.stat (throttled_time in
    ns), memory.usage_in_bytes and memory.max_usage_in_bytes, memory.oom_control
    (`oom_kill`), and memory.kmem.tcp.usage_in_bytes / max_usage_in_bytes (the TCP
    buffers, "" where absent). The peak adds the two peaks: an upper bound when they did
    not peak together."""
    stat = parse_keyed(cpu_stat)
    usage = parse_single(memory_usage)
    peak = parse_single(memory_max_usage)
    tcp = parse_single(tcp_usage) or 0
    tcp_peak = parse_single(tcp_max_usage) or 0
    return CgroupReading(
        cpu_s=(parse_single(cpuacct_usage) or 0) / 1e9,
        throttled_periods=stat.get("nr_throttled", 0),
        periods=stat.get("nr_periods", 0),
        throttled_s=stat.get("throttled_time", 0) / 1e9,
        memory_bytes=usage + tcp if usage is not None else None,
        memory_peak_bytes=peak + tcp_peak if peak is not None else None,
        oom_kills=parse_keyed(oom_control).get("oom_kill", 0),
    )


def reading_v2(
    *, cpu_stat: str, memory_current: str, memory_peak: str, memory_events: str
) -> CgroupReading:
    """A v2 reading: cpu.stat (`usage_usec`, `nr_periods`, `nr_throttled`,
    `throttled_usec`), memory.current, memory.peak ("" before kernel 5.19: then None) and
    memory.events (`oom_kill`)."""
    stat = parse_keyed(cpu_stat)
    return CgroupReading(
        cpu_s=stat.get("usage_usec", 0) / 1e6,
        throttled_periods=stat.get("nr_throttled", 0),
        periods=stat.get("nr_periods", 0),
        throttled_s=stat.get("throttled_usec", 0) / 1e6,
        memory_bytes=parse_single(memory_current),
        memory_peak_bytes=parse_single(memory_peak),
        oom_kills=parse_keyed(memory_events).get("oom_kill", 0),
    )


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/<pid>/cgroup as controller → path: each v1 line's controllers (`cpu,cpuacct`
    gives both), and v2's single line (`0::/path`) under the key `""`."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            paths[""] = path
        for controller in controllers.split(","):
            if controller:
                paths[controller] = path
    return paths


@dataclass(frozen=True)
class Mount:
    """A cgroup hierarchy's mount: where, its root, v1's controllers (empty for v2),
    and whether it is read-only."""

    mountpoint: str
    root: str
    version: int  # 1 or 2
    controllers: tuple[str, ...] = ()
    read_only: bool = False


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts in /proc/self/mountinfo (`id parent dev root
    mountpoint options [optional…] - fstype source superoptions`)."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        if not separator:
            continue
        fields = before.split()
        tail = after.split()
        if len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, mountpoint, options = fields[3], fields[4], fields[5].split(",")
        read_only = "ro" in options or "ro" in tail[2].split(",")
        if tail[0] == "cgroup2":
            mounts.append(Mount(mountpoint, root, 2, (), read_only))
            continue
        known = tuple(c for c in tail[2].split(",") if c in V1_CONTROLLERS)
        mounts.append(Mount(mountpoint, root, 1, known, read_only))
    return mounts


def relative_path(own: str, mount_root: str) -> str:
    """This process's cgroup path below a mount's root (a container sees its own group
    as the mount's `/`): `/a/b` under root `/a` is `/b`."""
    if mount_root in ("", "/"):
        return own
    if own == mount_root or own.startswith(mount_root.rstrip("/") + "/"):
        return own[len(mount_root.rstrip("/")) :] or "/"
    return own


def parse_size(text: str) -> int:
    """`512M`, `1G`, `1.5GiB`, `65536` → bytes (K, M, G, T are powers of 1024); a
    ValueError names anything else."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"memory size {text!r} is not like 512M, 1G or 65536 (bytes)")
    number, unit, _ = match.groups()
    size = int(float(number) * _UNITS[unit.upper()])
    if size <= 0:
        raise ValueError(f"memory size {text!r} must be more than 0 bytes")
    return size


def format_size(size_bytes: int) -> str:
    """Bytes as the largest whole unit that divides them: 536870912 → `512M`."""
    for unit in ("T", "G", "M", "K"):
        if size_bytes % _UNITS[unit] == 0:
            return f"{size_bytes // _UNITS[unit]}{unit}"
    return str(size_bytes)


def v2_cpu_max(quota_cores: float, period_us: int = 100_000) -> str:
    """What cpu.max takes for a quota of `quota_cores` cores (`50000 100000` for 0.5)."""
    return f"{max(1000, round(quota_cores * period_us))} {period_us}"

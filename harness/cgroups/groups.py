"""The harness's cgroups: found once per run, one made per server (and load, database),
read at each step's ends, removed after.

`detect_support` decides once which cgroups this process may make: v2 where a cgroup2
hierarchy offers this process's group the cpu, cpuset and memory controllers, else v1's
cpu, cpuacct, cpuset and memory hierarchies (this machine's: a v1/v2 hybrid whose v2 has
no controller), else none, with the reason (not root, a read-only mount, a controller not
mounted). Each group is made below this process's own group in each hierarchy
(`serverbench-<harness pid>-<n>-<role>`), so a container's or a sandbox's own limits still
hold over it.

A process joins its group before it execs (drivers.processes.spawn writes its pid into
each `cgroup.procs` file), so everything it runs and forks — a worker, a daemon that
double-forked out of its process group — is counted. `cpuset` pins it (what `taskset -c`
does without cgroups); `cpu` caps it (`--cpu-quota`) and counts throttling; `memory` caps
it (`--memory-max`), and counts its peak and the kernel's OOM kills.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.cgroups.files import (
    SOCKET_MEMORY,
    V1_CONTROLLERS,
    V2_CONTROLLERS,
    CgroupReading,
    Mount,
    parse_mountinfo,
    parse_proc_cgroup,
    reading_v1,
    reading_v2,
    relative_path,
    v2_cpu_max,
)

GROUP_PREFIX = "serverbench-"
FORCE_ENV = "SERVERBENCH_CGROUPS"  # `none`: do not use cgroups (taskset and process trees)
CFS_PERIOD_US = 100_000
EMPTY_WAIT_S = 2.0  # for a group's killed processes to be reaped before it is removed
_counter = itertools.count(1)


@dataclass(frozen=True)
class CgroupSupport:
    """What this process may do with cgroups: `mode` v1, v2 or none; `reason`: why not v2
    (v1), or why none; `parents`: where its groups are made (v1: per controller; v2: one
    directory, key "")."""

    mode: str
    reason: str | None = None
    parents: dict[str, Path] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return self.mode != "none"

    @property
    def socket_memory(self) -> str:
        """Whether the group's memory includes its sockets' buffers, in words."""
        return SOCKET_MEMORY.get(self.mode, "not measured (no cgroup)")

    def describe(self) -> dict[str, str | None]:
        """What run.json records (config.cgroups and each case's summary.cgroup)."""
        return {"mode": self.mode, "reason": self.reason}


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _probe(directory: Path) -> str | None:
    """Why a group cannot be made in `directory` (None: it can)."""
    probe = directory / f"{GROUP_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError as error:
        return f"cannot create a cgroup in {directory}: {error.strerror}"
    with contextlib.suppress(OSError):
        probe.rmdir()
    return None


def _v2_support(mount: Mount, own: str) -> CgroupSupport | str:
    """v2 below this process's group, or why not."""
    if mount.read_only:
        return f"cgroup v2 at {mount.mountpoint} is mounted read-only"
    parent = Path(mount.mountpoint + relative_path(own, mount.root))
    try:
        offered = (parent / "cgroup.controllers").read_text().split()
    except OSError as error:
        return f"cgroup v2 at {mount.mountpoint}: {error.strerror}"
    missing = [c for c in V2_CONTROLLERS if c not in offered]
    if missing:
        return (
            f"cgroup v2 at {mount.mountpoint} offers {' '.join(offered) or 'no controller'} to "
            f"this process's group, not {', '.join(missing)}"
        )
    try:
        enabled = (parent / "cgroup.subtree_control").read_text().split()
        wanted = [c for c in V2_CONTROLLERS if c not in enabled]
        if wanted:  # refused (EBUSY) where this group holds processes itself
            _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    except OSError as error:
        return f"cgroup v2 at {parent}: cannot enable {', '.join(V2_CONTROLLERS)}: {error.strerror}"
    why = _probe(parent)
    return why if why is not None else CgroupSupport("v2", None, {"": parent})


def _v1_support(mounts: list[Mount], own: dict[str, str]) -> CgroupSupport | str:
    parents: dict[str, Path] = {}
    for controller in V1_CONTROLLERS:
        mount = next((m for m in mounts if m.version == 1 and controller in m.controllers), None)
        if mount is None:
            return f"the cgroup v1 {controller} controller is not mounted"
        if mount.read_only:
            return f"the cgroup v1 {controller} hierarchy ({mount.mountpoint}) is read-only"
        path = relative_path(own.get(controller, "/"), mount.root)
        parents[controller] = Path(mount.mountpoint + (path if path != "/" else ""))
    for directory in dict.fromkeys(parents.values()):
        why = _probe(directory)
        if why is not None:
            return why
    return CgroupSupport("v1", None, parents)


def detect_support(mountinfo: str | None = None, proc_cgroup: str | None = None) -> CgroupSupport:
    """Which cgroups this process may make (read from /proc/self unless given)."""
    if os.environ.get(FORCE_ENV, "").lower() in ("none", "off", "0"):
        return CgroupSupport("none", f"{FORCE_ENV}={os.environ[FORCE_ENV]}")
    try:
        mountinfo = mountinfo if mountinfo is not None else _read("/proc/self/mountinfo")
        proc_cgroup = proc_cgroup if proc_cgroup is not None else _read("/proc/self/cgroup")
    except OSError as error:
        return CgroupSupport("none", f"cannot read /proc/self: {error.strerror}")
    mounts = parse_mountinfo(mountinfo)
    own = parse_proc_cgroup(proc_cgroup)
    reasons: list[str] = []
    unified = next((m for m in mounts if m.version == 2), None)
    if unified is not None and "" in own:
        found = _v2_support(unified, own[""])
        if isinstance(found, CgroupSupport):
            return found
        reasons.append(found)
    else:
        reasons.append("no cgroup v2 hierarchy is mounted")
    found = _v1_support(mounts, own)
    if isinstance(found, CgroupSupport):
        return CgroupSupport("v1", "; ".join(reasons) or None, found.parents)
    reasons.append(found)
    return CgroupSupport("none", "; ".join(reasons))


def _read(path: str | Path) -> str:
    return Path(path).read_text()


_detected: CgroupSupport | None = None


def run_support() -> CgroupSupport:
    """`detect_support`, once per process; where cgroups cannot be used, one line on
    stderr says so and why (each case then records `none`)."""
    global _detected
    if _detected is None:
        _detected = detect_support()
        if not _detected.usable:
            print(
                f"harness: cgroups not used ({_detected.reason}): taskset pins, CPU and "
                "memory are read from process trees",
                file=sys.stderr,
            )
    return _detected


class Cgroup:
    """One group of the harness's (in each v1 hierarchy, or one v2 directory)."""

    def __init__(self, support: CgroupSupport, directories: dict[str, Path], role: str) -> None:
        self.support = support
        self.directories = directories  # controller → its directory (v2: "" → one)
        self.role = role
        self.cpu_quota: float | None = None
        self.memory_max_bytes: int | None = None
        self.cpus: str | None = None

    @property
    def mode(self) -> str:
        return self.support.mode

    @property
    def name(self) -> str:
        return next(iter(self.directories.values())).name

    @property
    def procs_files(self) -> list[str]:
        """Each hierarchy's `cgroup.procs`: what a process writes its pid into to join."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.directories.values())]

    @classmethod
    def create(
        cls,
        support: CgroupSupport,
        role: str,
        *,
        cpus: str | None = None,
        cpu_quota: float | None = None,
        memory_max_bytes: int | None = None,
    ) -> Cgroup:
        """A new group for `role` (server, load, database), pinned to `cpus` (None: the
        parent's), capped at `cpu_quota` cores and `memory_max_bytes`. OSError when the
        kernel refuses (what was made is removed)."""
        if not support.usable:
            raise OSError(f"cgroups are not usable: {support.reason}")
        name = f"{GROUP_PREFIX}{os.getpid()}-{next(_counter)}-{role}"
        directories = {key: parent / name for key, parent in support.parents.items()}
        group = cls(support, directories, role)
        try:
            for directory in dict.fromkeys(directories.values()):
                directory.mkdir()
            if support.mode == "v1":
                group._set_up_v1(cpus, cpu_quota, memory_max_bytes)
            else:
                group._set_up_v2(cpus, cpu_quota, memory_max_bytes)
        except OSError:
            group.remove()
            raise
        group.cpus, group.cpu_quota, group.memory_max_bytes = cpus, cpu_quota, memory_max_bytes
        return group

    def _set_up_v1(self, cpus: str | None, quota: float | None, memory_max: int | None) -> None:
        cpuset, parent = self.directories["cpuset"], self.support.parents["cpuset"]
        # a new v1 cpuset is empty: no task may join before cpus and mems are written
        _write(cpuset / "cpuset.cpus", cpus or _read(parent / "cpuset.effective_cpus").strip())
        _write(cpuset / "cpuset.mems", _read(parent / "cpuset.effective_mems").strip())
        if quota is not None:
            cpu = self.directories["cpu"]
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(max(1000, round(quota * CFS_PERIOD_US))))
        memory = self.directories["memory"]
        # v1 counts the TCP buffers only once their limit is written (unlimited here)
        with contextlib.suppress(OSError):
            _write(memory / "memory.kmem.tcp.limit_in_bytes", "-1")
        if memory_max is not None:
            _write(memory / "memory.limit_in_bytes", str(memory_max))

    def _set_up_v2(self, cpus: str | None, quota: float | None, memory_max: int | None) -> None:
        directory = self.directories[""]
        if cpus is not None:
            _write(directory / "cpuset.cpus", cpus)
        if quota is not None:
            _write(directory / "cpu.max", v2_cpu_max(quota, CFS_PERIOD_US))
        if memory_max is not None:
            _write(directory / "memory.max", str(memory_max))
            with contextlib.suppress(OSError):  # no swap to escape to: the limit holds
                _write(directory / "memory.swap.max", "0")

    def read(self) -> CgroupReading:
        """What the group has counted so far."""
        if self.mode == "v1":
            memory = self.directories["memory"]
            return reading_v1(
                cpuacct_usage=_read(self.directories["cpuacct"] / "cpuacct.usage"),
                cpu_stat=_read(self.directories["cpu"] / "cpu.stat"),
                memory_usage=_read(memory / "memory.usage_in_bytes"),
                memory_max_usage=_read(memory / "memory.max_usage_in_bytes"),
                oom_control=_read(memory / "memory.oom_control"),
                tcp_usage=_read_or_empty(memory / "memory.kmem.tcp.usage_in_bytes"),
                tcp_max_usage=_read_or_empty(memory / "memory.kmem.tcp.max_usage_in_bytes"),
            )
        directory = self.directories[""]
        return reading_v2(
            cpu_stat=_read(directory / "cpu.stat"),
            memory_current=_read(directory / "memory.current"),
            memory_peak=_read_or_empty(directory / "memory.peak"),
            memory_events=_read(directory / "memory.events"),
        )

    def adopt(self, pids: Iterable[int]) -> None:
        """Move running processes into the group (each joins every hierarchy; what they
        fork afterwards is born in it). OSError when the kernel refuses one."""
        for pid in pids:
            for path in self.procs_files:
                _write(Path(path), str(pid))

    def pids(self) -> set[int]:
        """Every process in the group now."""
        pids: set[int] = set()
        for path in self.procs_files:
            with contextlib.suppress(OSError):
                pids.update(int(line) for line in _read(path).split())
        return pids

    def kill_all(self, signum: int = signal.SIGKILL) -> list[int]:
        """Signal every process in the group (what a stop left: a daemon that left its
        process group); the pids signalled."""
        killed = []
        for pid in sorted(self.pids()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
                killed.append(pid)
        return killed

    def describe(self) -> dict[str, object]:
        """What a case records of its server's group (summary.cgroup)."""
        return {
            **self.support.describe(),
            "group": self.name,
            "pinning": "cpuset" if self.cpus is not None else None,
            "cpu_quota": self.cpu_quota,
            "memory_max_bytes": self.memory_max_bytes,
            "socket_memory": self.support.socket_memory,
        }

    def remove(self) -> None:
        """Kill what is left in it, then remove it from every hierarchy (a process that
        will not die is moved to the parent group first)."""
        deadline = time.monotonic() + EMPTY_WAIT_S
        while self.kill_all() and time.monotonic() < deadline:
            time.sleep(0.05)
        for key, directory in self.directories.items():
            if not directory.exists():
                continue
            parent = self.support.parents[key] / "cgroup.procs"
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    _write(parent, str(pid))
            with contextlib.suppress(OSError):
                directory.rmdir()

    def __enter__(self) -> Cgroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()


def adopted(group: Cgroup | None, pids: Iterable[int]) -> Cgroup | None:
    """`group` with `pids` moved into it; None when there is none or one could not join
    (then nothing is read from it: its CPU would be partial)."""
    if group is None:
        return None
    try:
        group.adopt(pids)
    except OSError:
        return None
    return group


def _read_or_empty(path: Path) -> str:
    try:
        return _read(path)
    except OSError:
        return ""


def leftover_groups(support: CgroupSupport | None = None) -> list[Path]:
    """Groups of the harness's whose harness is gone (a killed run's): their directories
    in every hierarchy."""
    support = support or detect_support()
    found: list[Path] = []
    for parent in dict.fromkeys(support.parents.values()):
        for directory in sorted(parent.glob(f"{GROUP_PREFIX}*")):
            pid = directory.name[len(GROUP_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                found.append(directory)
    return found


def remove_leftover_groups(directories: list[Path]) -> list[str]:
    """Remove killed runs' groups (`leftover_groups`): what still runs in one is killed
    first; what could not be removed (path: why), none when all went."""
    problems = []
    for directory in directories:
        for pid_text in _read_or_empty(directory / "cgroup.procs").split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_text), signal.SIGKILL)
        deadline = time.monotonic() + EMPTY_WAIT_S
        while True:
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as error:  # EBUSY until its killed processes are gone
                if time.monotonic() >= deadline:
                    problems.append(f"{directory}: {error.strerror}")
                    break
                time.sleep(0.05)
    return problems

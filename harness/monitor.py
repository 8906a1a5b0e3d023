"""The per-second monitor: system and process samples (psutil) merged with server telemetry.

One thread samples once per second: system CPU user/sys/idle and per core, memory
used/cached, CPU % and RSS of the server process tree and of the load generators, and,
when the harness started the database (FerretDB and PostgreSQL), its CPU % (`db_cpu_pct`,
of one core, summed over its processes). Each row is merged with the newest telemetry line
of every server worker. The runner marks step windows (`begin_step`/`end_step`);
`step_stats` summarises a window.

At each step's start and end the monitor also reads the CPU clocks (`read_cpu_snapshot`):
each CPU's busy time from /proc/stat and the CPU time of every process the harness knows
(itself, its reaped children, every live descendant). harness.run.analysis.step_noise
turns two of them into what other processes used on the server's and the load's CPUs.
Each process tree's CPU wait (how long it was ready to run while another process held
its CPU: a shared machine, not the server, shaped the figures) is read from the kernel
(schedstat) at each sample.

When the server runs in a cgroup of its own (harness.cgroups), the step's server CPU is
the group's usage counter at the step's two ends instead (every process the server
started, whatever tree or process group it left), and the group's throttling, memory and
OOM kills are read there too (`cgroup_step`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import itertools
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from harness.cgroups.files import CgroupReading
from harness.cgroups.groups import Cgroup
from model.files import atomic_writer

SAMPLE_INTERVAL_S = 1.0
TREE_REFRESH_S = 5.0  # how often the monitor looks for new processes in a watched tree
TELEMETRY_SUMS = (
    "open",
    "requests",
    "messages",
    "bad",
    "stored",
    "sink_errors",
    "backlog",
    "gc_collections",
    "rss_bytes",
)
TELEMETRY_MAXIMA = ("tick_avg_ms", "tick_max_ms", "gc_pause_ms")
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


@dataclass(frozen=True)
class StepWindow:
    index: int
    started: float
    ended: float | None = None
    cpu_before: CpuSnapshot | None = None
    cpu_after: CpuSnapshot | None = None
    # the server tree's CPU seconds per process at the step's start and end
    # (`_ProcessGroup.cpu_seconds`): its exact CPU over the window (`window_cpu_pct`)
    server_cpu_s_before: dict[int, float] | None = None
    server_cpu_s_after: dict[int, float] | None = None
    # the server's cgroup at the step's start and end (None: it runs in none)
    server_cgroup_before: CgroupReading | None = None
    server_cgroup_after: CgroupReading | None = None
    # the case's load cgroup (every load generator of the step) at its start and end
    load_cgroup_before: CgroupReading | None = None
    load_cgroup_after: CgroupReading | None = None
    # the database's cgroup (FerretDB, PostgreSQL and its backends) at its start and end
    database_cgroup_before: CgroupReading | None = None
    database_cgroup_after: CgroupReading | None = None


def _reading(cgroup: Cgroup | None) -> CgroupReading | None:
    """`cgroup` read now (None: no group, or it cannot be read)."""
    if cgroup is None:
        return None
    try:
        return cgroup.read()
    except (OSError, ValueError):
        return None


def cgroup_step(before: CgroupReading, after: CgroupReading) -> dict[str, Any]:
    """What a cgroup counted between two readings: CPU seconds, CFS periods throttled (of
    those with work) and the time throttled, the OOM kills, and its memory at the end."""
    return {
        "cpu_s": round(max(0.0, after.cpu_s - before.cpu_s), 6),
        "throttled_periods": max(0, after.throttled_periods - before.throttled_periods),
        "periods": max(0, after.periods - before.periods),
        "throttled_s": round(max(0.0, after.throttled_s - before.throttled_s), 6),
        "oom_kills": max(0, after.oom_kills - before.oom_kills),
        "memory_bytes": after.memory_bytes,
    }


def window_cpu_pct(
    before: dict[int, float], after: dict[int, float], wall_s: float
) -> float | None:
    """% of one core some processes used between two readings of their CPU seconds: each
    process's gain, one started in between counted from 0 (all its time is the window's);
    one that ended in between is lost unless its parent reaped it (the parent's clock has
    it then). None for a window with no wall time."""
    if wall_s <= 0:
        return None
    used_s = sum(max(0.0, cpu_s - before.get(pid, 0.0)) for pid, cpu_s in after.items())
    return used_s / wall_s * 100.0


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


class _ProcessGroup:
    """CPU %, RSS and CPU wait of some processes and their children (psutil keeps
    per-process CPU clocks; the run delay is read from the kernel at each sample).

    Finding the children reads every process's /proc entry (~3 ms with 130 processes), so
    the tree is looked at again only every TREE_REFRESH_S (and whenever the roots change):
    a server's workers and the load generators are there from their start.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roots: list[int] = []
        self._processes: dict[int, psutil.Process] = {}
        self._refreshed = 0.0  # time.monotonic() of the last look at the tree
        self._delays: dict[int, tuple[float, int]] = {}  # pid → (monotonic s, run delay ns)

    def set_roots(self, pids: list[int]) -> None:
        """Watch these processes from now on; their CPU clocks start at once."""
        with self._lock:
            self._roots = list(pids)
            self._refresh()

    def _refresh(self) -> set[int]:
        self._refreshed = time.monotonic()
        pids: set[int] = set()
        for root in self._roots:
            try:
                pids.add(root)
                pids.update(child.pid for child in psutil.Process(root).children(recursive=True))
            except psutil.Error:
                continue
        for pid in pids - set(self._processes):
            try:
                self._processes[pid] = psutil.Process(pid)
                self._processes[pid].cpu_percent(None)  # the first call starts its clock
                self._delays[pid] = (time.monotonic(), run_delay_ns(pid))
            except psutil.Error:
                pass
        for gone in set(self._processes) - pids:
            del self._processes[gone]
            self._delays.pop(gone, None)
        return pids

    def cpu_seconds(self) -> dict[int, float]:
        """Each process's CPU seconds now (user + system, its reaped children's
        included), the tree looked at afresh: read at a step's two ends, its exact CPU."""
        with self._lock:
            pids = self._refresh()
            clocks: dict[int, float] = {}
            for pid in pids:
                process = self._processes.get(pid)
                if process is None:
                    continue
                try:
                    times = process.cpu_times()
                except psutil.Error:
                    continue
                clocks[pid] = (
                    times.user + times.system + times.children_user + times.children_system
                )
            return clocks

    def sample(self) -> tuple[float, int, float]:
        """CPU % (of one core, summed) since the last sample, RSS, and CPU wait (% of one
        core spent runnable but not running), of the whole group."""
        with self._lock:
            known = dict(self._processes)
            if time.monotonic() - self._refreshed >= TREE_REFRESH_S:
                self._refresh()
            cpu_pct = 0.0
            wait_pct = 0.0
            rss = 0
            now = time.monotonic()
            for pid, process in known.items():
                try:
                    cpu_pct += process.cpu_percent(None)
                    rss += process.memory_info().rss
                except psutil.Error:
                    self._processes.pop(pid, None)
                    self._delays.pop(pid, None)
                    continue
                before_t, before_ns = self._delays.get(pid, (now, 0))
                delay_ns = run_delay_ns(pid)
                if now > before_t:
                    wait_pct += max(0, delay_ns - before_ns) / ((now - before_t) * 1e9) * 100.0
                self._delays[pid] = (now, delay_ns)
            return cpu_pct, rss, wait_pct


class Monitor:
    """Samples once a second in a thread until stopped; rows kept in memory, then written."""

    def __init__(
        self,
        telemetry_source: Callable[[], dict[int, dict[str, Any]]],
        interval_s: float = SAMPLE_INTERVAL_S,
        on_sample: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self._telemetry_source = telemetry_source
        self._interval_s = interval_s
        self._on_sample = on_sample
        self._server = _ProcessGroup()
        self._agent = _ProcessGroup()
        self._database: _ProcessGroup | None = None
        self._server_cgroup: Cgroup | None = None
        self._load_cgroup: Cgroup | None = None
        self._database_cgroup: Cgroup | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="monitor", daemon=True)
        self.rows: list[dict[str, Any]] = []
        self.windows: list[StepWindow] = []
        self._step: int | None = None
        self._previous_requests: tuple[float, int] | None = None

    # -- control ---------------------------------------------------------------------
    def start(self, server_pids: list[int]) -> None:
        self._server.set_roots(server_pids)
        psutil.cpu_times_percent(None, percpu=False)
        psutil.cpu_percent(None, percpu=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2 * self._interval_s)

    def set_server_cgroup(self, cgroup: Cgroup | None) -> None:
        """The cgroup the server runs in: its CPU, throttling and memory are read there."""
        self._server_cgroup = cgroup

    def read_server_cgroup(self) -> CgroupReading | None:
        """The server's cgroup now (None: it runs in none, or it cannot be read)."""
        return _reading(self._server_cgroup)

    def set_load_cgroup(self, cgroup: Cgroup | None) -> None:
        """The cgroup the case's load generators join: their CPU over a step is read there."""
        self._load_cgroup = cgroup

    def read_load_cgroup(self) -> CgroupReading | None:
        """The load cgroup now (None: there is none, or it cannot be read)."""
        return _reading(self._load_cgroup)

    def set_database_cgroup(self, cgroup: Cgroup | None) -> None:
        """The cgroup the run's database runs in: its CPU over a step is read there."""
        self._database_cgroup = cgroup

    def set_agent_pids(self, pids: list[int]) -> None:
        self._agent.set_roots(pids)

    def set_database_pids(self, pids: list[int]) -> None:
        """Watch the database's processes too (their children: PostgreSQL's backends)."""
        group = _ProcessGroup()
        group.set_roots(pids)
        self._database = group

    def begin_step(self, index: int) -> None:
        """A step starts now (its CPU clocks read)."""
        snapshot = read_cpu_snapshot()
        server_cpu_s = self._server.cpu_seconds()
        cgroup = self.read_server_cgroup()
        load_cgroup = self.read_load_cgroup()
        database_cgroup = _reading(self._database_cgroup)
        with self._lock:
            self._step = index
            self.windows.append(
                StepWindow(
                    index,
                    time.time(),
                    cpu_before=snapshot,
                    server_cpu_s_before=server_cpu_s,
                    server_cgroup_before=cgroup,
                    load_cgroup_before=load_cgroup,
                    database_cgroup_before=database_cgroup,
                )
            )

    def end_step(self) -> StepWindow:
        """The step ends now: its window, with its CPU clocks at both ends."""
        ended = time.time()
        cgroup = self.read_server_cgroup()
        load_cgroup = self.read_load_cgroup()
        database_cgroup = _reading(self._database_cgroup)
        server_cpu_s = self._server.cpu_seconds()
        snapshot = read_cpu_snapshot()
        with self._lock:
            window = self.windows[-1]
            self.windows[-1] = dataclasses.replace(
                window,
                ended=ended,
                cpu_after=snapshot,
                server_cpu_s_after=server_cpu_s,
                server_cgroup_after=cgroup,
                load_cgroup_after=load_cgroup,
                database_cgroup_after=database_cgroup,
            )
            self._step = None
            self._agent.set_roots([])
            return self.windows[-1]

    # -- sampling --------------------------------------------------------------------
    def _run(self) -> None:
        next_at = time.monotonic() + self._interval_s
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self._interval_s
            row = self.sample()
            with self._lock:
                self.rows.append(row)
            if self._on_sample is not None:
                self._on_sample(row)

    def sample(self) -> dict[str, Any]:
        """One row: system, server tree, agent processes, and the servers' telemetry."""
        now = time.time()
        times = psutil.cpu_times_percent(None, percpu=False)
        per_core = psutil.cpu_percent(None, percpu=True)
        memory = psutil.virtual_memory()
        server_cpu, server_rss, server_wait = self._server.sample()
        agent_cpu, agent_rss, agent_wait = self._agent.sample()
        row: dict[str, Any] = {
            "t": round(now, 3),
            "step": self._step if self._step is not None else "",
            "cpu_user_pct": times.user,
            "cpu_system_pct": times.system,
            "cpu_idle_pct": times.idle,
            **{f"cpu{i}_pct": pct for i, pct in enumerate(per_core)},
            "mem_used_bytes": memory.used,
            "mem_cached_bytes": getattr(memory, "cached", 0),
            # the whole host's: what a connection ramp runs out of, and the kernel's slab
            # (each socket's own objects, both ends on one box)
            "mem_available_bytes": memory.available,
            "kernel_slab_bytes": getattr(memory, "slab", 0),
            **host_socket_readings(),
            "server_cpu_pct": round(server_cpu, 1),
            "server_rss_bytes": server_rss,
            "server_cpu_wait_pct": round(server_wait, 1),
            "agent_cpu_pct": round(agent_cpu, 1),
            "agent_rss_bytes": agent_rss,
            "agent_cpu_wait_pct": round(agent_wait, 1),
        }
        if self._database is not None:
            row["db_cpu_pct"] = round(self._database.sample()[0], 1)
        cgroup = self.read_server_cgroup()
        if cgroup is not None:  # every process of the server's, sockets' buffers included
            row["server_cgroup_memory_bytes"] = cgroup.memory_bytes
        row.update(merge_telemetry(self._telemetry_source()))
        requests = row.get("requests")
        if isinstance(requests, int):
            if self._previous_requests is not None:
                before_t, before = self._previous_requests
                row["requests_per_s"] = round((requests - before) / max(1e-6, now - before_t), 1)
            self._previous_requests = (now, requests)
        return row

    # -- results ---------------------------------------------------------------------
    def write_csv(self, path: Path) -> None:
        with self._lock:
            rows = list(self.rows)
        columns: list[str] = []
        for row in rows:
            columns.extend(key for key in row if key not in columns)
        with atomic_writer(path, newline="") as handle:  # whole or not at all
            writer = csv.DictWriter(handle, fieldnames=columns or ["t"])
            writer.writeheader()
            writer.writerows(rows)


def merge_telemetry(latest_by_pid: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Every worker's newest line as one: counts summed, lags and pauses at their maximum."""
    if not latest_by_pid:
        return {}
    lines = list(latest_by_pid.values())
    merged: dict[str, Any] = {"workers": len(lines)}
    for key in TELEMETRY_SUMS:
        merged["telemetry_" + key if key == "rss_bytes" else key] = sum(
            int(line.get(key, 0)) for line in lines
        )
    for key in TELEMETRY_MAXIMA:
        merged[key] = max(float(line.get(key, 0.0)) for line in lines)
    merged["max_open"] = sum(int(line.get("max_open", 0)) for line in lines)
    return merged


def step_stats(
    rows: list[dict[str, Any]],
    telemetry: list[dict[str, Any]],
    window: StepWindow,
    until: float | None = None,
) -> dict[str, Any]:
    """Server/agent/database CPU and server/agent CPU wait (mean), RSS (max), tick lag
    (mean of avgs, max of maxima), and the sink's records refused (`sink_errors` gained)
    and waiting (`backlog`, max) in a window; `db_cpu_pct` None when no database was
    watched. `until`: the samples and telemetry read end there when the window was closed
    later than the step really ended (a connection ramp's top step, seen closing late)."""
    end = window.ended or time.time()
    if until is not None:
        end = min(end, until)
    inside = [r for r in rows if window.started < r["t"] <= end + 0.5]
    lines = [t for t in telemetry if window.started < t["t"] <= end + 0.5]
    stats: dict[str, Any] = {
        "server_cpu_pct": None,
        "agent_cpu_pct": None,
        "db_cpu_pct": None,
        "server_cpu_wait_pct": None,
        "agent_cpu_wait_pct": None,
        "rss_max_bytes": None,
        "tick_ms": {"avg": None, "max": None},
        "sink_errors": None,
        "backlog_max": None,
        "server_cpu_s": None,
        "cgroup": None,
    }
    if inside:  # the 1 s samples overlapping the step's edges (charts; fallbacks)
        stats["server_cpu_pct"] = round(statistics.fmean(r["server_cpu_pct"] for r in inside), 1)
        stats["agent_cpu_pct"] = round(statistics.fmean(r["agent_cpu_pct"] for r in inside), 1)
        stats["rss_max_bytes"] = max(r["server_rss_bytes"] for r in inside)
        for key in ("server_cpu_wait_pct", "agent_cpu_wait_pct"):
            waits = [r[key] for r in inside if r.get(key) is not None]
            stats[key] = round(statistics.fmean(waits), 1) if waits else None
        database = [r["db_cpu_pct"] for r in inside if "db_cpu_pct" in r]
        if database:
            stats["db_cpu_pct"] = round(statistics.fmean(database), 1)
    # the server's CPU is read at the step's two ends: exact over the step, where a mean of
    # the samples would count the idle second straddling its start (a saturated 2 s step
    # read 70 % that way)
    before, after = window.server_cpu_s_before, window.server_cpu_s_after
    wall_s = (window.ended - window.started) if window.ended is not None else 0.0
    if before is not None and after and window.ended is not None:
        exact = window_cpu_pct(before, after, wall_s)
        if exact is not None:
            stats["server_cpu_pct"] = round(exact, 1)
            stats["server_cpu_s"] = round(exact * wall_s / 100.0, 6)
    # in a cgroup: its usage counter, every process the server started (a daemon that
    # left the process tree included)
    if window.server_cgroup_before is not None and window.server_cgroup_after is not None:
        counted = cgroup_step(window.server_cgroup_before, window.server_cgroup_after)
        stats["cgroup"] = counted
        stats["server_cpu_s"] = counted["cpu_s"]
        if wall_s > 0:
            stats["server_cpu_pct"] = round(counted["cpu_s"] / wall_s * 100.0, 1)
    # the database in its group: exact over the step too (its backends forked since included)
    db_before, db_after = window.database_cgroup_before, window.database_cgroup_after
    if db_before is not None and db_after is not None and wall_s > 0:
        db_cpu_s = max(0.0, db_after.cpu_s - db_before.cpu_s)
        stats["db_cpu_pct"] = round(db_cpu_s / wall_s * 100.0, 1)
    # sink_errors counts since the server started: the step's share is its gain
    counted = [r for r in rows if "sink_errors" in r and r["t"] <= end + 0.5]
    errors = [r["sink_errors"] for r in counted]
    errors_before = [r["sink_errors"] for r in counted if r["t"] <= window.started]
    if len(errors) > len(errors_before):  # a telemetry row inside the window
        stats["sink_errors"] = errors[-1] - (errors_before[-1] if errors_before else errors[0])
        stats["backlog_max"] = max(r["backlog"] for r in inside if "backlog" in r)
    if lines:
        stats["tick_ms"] = {
            "avg": round(statistics.fmean(t["tick_avg_ms"] for t in lines), 3),
            "max": round(max(t["tick_max_ms"] for t in lines), 3),
        }
    return stats


def replies_per_second(telemetry: list[dict[str, Any]], window: StepWindow) -> list[float]:
    """The server's replies in each whole telemetry interval inside a step's window, per
    second: each worker's `requests` counter differenced line to line (its lines come once
    a second), the workers summed by interval. Intervals that straddle the window's start
    or end (the load starting, stopping) are left out; empty without telemetry."""
    end = window.ended or time.time()
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for line in telemetry:
        if "requests" in line and "t" in line:
            by_pid.setdefault(int(line.get("pid", 0)), []).append(line)
    buckets: dict[int, float] = {}
    for lines in by_pid.values():
        lines.sort(key=lambda line: line["t"])
        for before, after in itertools.pairwise(lines):
            span_s = after["t"] - before["t"]
            if span_s <= 0 or before["t"] < window.started or after["t"] > end:
                continue
            second = int(after["t"] - window.started)
            rate = (int(after["requests"]) - int(before["requests"])) / span_s
            buckets[second] = buckets.get(second, 0.0) + rate
    return [round(buckets[second], 1) for second in sorted(buckets)]

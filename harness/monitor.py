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

The kernel's readings are harness.host_readings'; what a step's window adds up to
(`step_stats`, `replies_per_second`) is harness.step_stats'.
"""

from __future__ import annotations

import csv
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from harness.cgroups.files import CgroupReading
from harness.cgroups.groups import Cgroup
from harness.host_readings import CpuSnapshot as CpuSnapshot
from harness.host_readings import ProcessClock as ProcessClock
from harness.host_readings import host_socket_readings, read_cpu_snapshot
from harness.host_readings import parse_proc_stat as parse_proc_stat
from harness.host_readings import parse_sockstat as parse_sockstat
from harness.host_readings import run_delay_ns as run_delay_ns
from harness.step_stats import StepWindow as StepWindow
from harness.step_stats import cgroup_step as cgroup_step
from harness.step_stats import merge_telemetry as merge_telemetry
from harness.step_stats import replies_per_second as replies_per_second
from harness.step_stats import step_stats as step_stats
from harness.step_stats import window_cpu_pct as window_cpu_pct
from model.files import atomic_writer

SAMPLE_INTERVAL_S = 1.0
TREE_REFRESH_S = 5.0  # how often the monitor looks for new processes in a watched tree


def _reading(cgroup: Cgroup | None) -> CgroupReading | None:
    """`cgroup` read now (None: no group, or it cannot be read)."""
    if cgroup is None:
        return None
    try:
        return cgroup.read()
    except (OSError, ValueError):
        return None


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

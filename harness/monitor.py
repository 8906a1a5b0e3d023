"""The per-second monitor: system and process samples (psutil) merged with server telemetry.

One thread samples once per second: system CPU user/sys/idle and per core, memory
used/cached, CPU % and RSS of the server process tree and of the load generators, and how
long each of them waited for a CPU it was ready to run on (another process held it: a
shared machine, not the server, shaped the figures). Each
row is merged with the newest telemetry line of every server worker. The runner marks
step windows (`begin_step`/`end_step`); `step_stats` summarises a window.
"""

from __future__ import annotations

import csv
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from model.files import atomic_writer

SAMPLE_INTERVAL_S = 1.0
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


@dataclass(frozen=True)
class StepWindow:
    index: int
    started: float
    ended: float | None = None


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
    per-process CPU clocks; the run delay is read from the kernel at each sample)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roots: list[int] = []
        self._processes: dict[int, psutil.Process] = {}
        self._delays: dict[int, tuple[float, int]] = {}  # pid → (monotonic s, run delay ns)

    def set_roots(self, pids: list[int]) -> None:
        """Watch these processes from now on; their CPU clocks start at once."""
        with self._lock:
            self._roots = list(pids)
            self._refresh()

    def _refresh(self) -> set[int]:
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

    def sample(self) -> tuple[float, int, float]:
        """CPU % (of one core, summed) since the last sample, RSS, and CPU wait (% of one
        core spent runnable but not running), of the whole group."""
        with self._lock:
            known = dict(self._processes)
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

    def set_agent_pids(self, pids: list[int]) -> None:
        self._agent.set_roots(pids)

    def begin_step(self, index: int) -> None:
        with self._lock:
            self._step = index
            self.windows.append(StepWindow(index, time.time()))

    def end_step(self) -> StepWindow:
        with self._lock:
            window = self.windows[-1]
            self.windows[-1] = StepWindow(window.index, window.started, time.time())
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
            "server_cpu_pct": round(server_cpu, 1),
            "server_rss_bytes": server_rss,
            "server_cpu_wait_pct": round(server_wait, 1),
            "agent_cpu_pct": round(agent_cpu, 1),
            "agent_rss_bytes": agent_rss,
            "agent_cpu_wait_pct": round(agent_wait, 1),
        }
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
    rows: list[dict[str, Any]], telemetry: list[dict[str, Any]], window: StepWindow
) -> dict[str, Any]:
    """Server/agent CPU and CPU wait (mean), RSS (max) and tick lag (mean of avgs, max of
    maxima) in a window."""
    end = window.ended or time.time()
    inside = [r for r in rows if window.started < r["t"] <= end + 0.5]
    lines = [t for t in telemetry if window.started < t["t"] <= end + 0.5]
    stats: dict[str, Any] = {
        "server_cpu_pct": None,
        "agent_cpu_pct": None,
        "server_cpu_wait_pct": None,
        "agent_cpu_wait_pct": None,
        "rss_max_bytes": None,
        "tick_ms": {"avg": None, "max": None},
    }
    if inside:
        stats["server_cpu_pct"] = round(statistics.fmean(r["server_cpu_pct"] for r in inside), 1)
        stats["agent_cpu_pct"] = round(statistics.fmean(r["agent_cpu_pct"] for r in inside), 1)
        stats["rss_max_bytes"] = max(r["server_rss_bytes"] for r in inside)
        for key in ("server_cpu_wait_pct", "agent_cpu_wait_pct"):
            waits = [r[key] for r in inside if r.get(key) is not None]
            stats[key] = round(statistics.fmean(waits), 1) if waits else None
    if lines:
        stats["tick_ms"] = {
            "avg": round(statistics.fmean(t["tick_avg_ms"] for t in lines), 3),
            "max": round(max(t["tick_max_ms"] for t in lines), 3),
        }
    return stats

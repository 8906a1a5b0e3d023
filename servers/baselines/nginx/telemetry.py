"""The baseline's telemetry: nginx has no counters of its own, so the contract's line is
made from `stub_status` (open connections, requests served) and psutil (RSS of the master
and its workers), one line per nginx worker (see servers.baselines.nginx for how the
counts are carried)."""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import psutil

from servers import contract
from servers.baselines.nginx.config import STATUS_PATH
from servers.baselines.nginx.process import Nginx

_STUB_STATUS = re.compile(rb"Active connections:\s*(\d+).*?\n\s*(\d+)\s+(\d+)\s+(\d+)", re.DOTALL)


class StubStatus:
    """Reads nginx's stub_status over one kept-alive connection, minus its own footprint."""

    def __init__(self, port: int, own_requests: int) -> None:
        self.port = port
        self.own_requests = own_requests  # probes already sent (nginx counts them too)
        self.max_open = 0
        self._connection: http.client.HTTPConnection | None = None

    def read(self) -> tuple[int, int] | None:
        """(open connections, requests served) without this reader's; None if unreadable."""
        for _ in range(2):  # one reconnect if nginx closed the kept-alive connection
            if self._connection is None:
                self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                self._connection.request("GET", STATUS_PATH)
                body = self._connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                self._connection.close()
                self._connection = None
                continue
            self.own_requests += 1
            match = _STUB_STATUS.search(body)
            if match is None:
                return None
            active, _accepts, _handled, requests = (int(g) for g in match.groups())
            # The status connection is one of the active ones and each read is a request.
            open_now = max(0, active - 1)
            self.max_open = max(self.max_open, open_now)
            return open_now, max(0, requests - self.own_requests)
        return None

    def close(self) -> None:
        """Close the kept-alive status connection."""
        if self._connection is not None:
            self._connection.close()


def _rss_bytes(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def telemetry_lines(
    nginx: Nginx,
    counts: tuple[int, int],
    max_open: int,
    port: int,
    worker_pids: Sequence[int],
) -> list[dict[str, Any]]:
    """One line per nginx worker (servers.baselines.nginx says how the counts are carried)."""
    open_now, requests = counts
    processes = {p.pid: p for p in nginx.processes()}
    master_rss = _rss_bytes(processes[nginx.pid]) if nginx.pid in processes else 0
    lines = []
    for worker, worker_pid in enumerate(worker_pids):
        worker_process = processes.get(worker_pid)
        rss = _rss_bytes(worker_process) if worker_process is not None else 0
        first = worker == 0
        line: dict[str, Any] = {
            "t": round(time.time(), 3),
            "pid": os.getpid() if first else worker_pid,
            "open": open_now if first else 0,
            "max_open": max_open if first else 0,
            "requests": requests if first else 0,
            "messages": 0,
            "bad": 0,
            "tick_avg_ms": 0.0,  # nginx has no event-loop probe
            "tick_max_ms": 0.0,
            "gc_collections": 0,
            "gc_pause_ms": 0.0,
            "stored": 0,
            "sink_errors": 0,
            "backlog": 0,
            "rss_bytes": rss + (master_rss if first else 0),
            "framework": "nginx",
            "loop": "epoll",
            "port": port,
            "worker": worker,
            "mc_port": 0,
            "backend_errors": 0,
        }
        lines.append({field: line[field] for field in contract.TELEMETRY_FIELDS})
    return lines


def worker_pids(nginx: Nginx, workers: int, timeout_s: float = 2.0) -> list[int]:
    """The pids of nginx's `workers` worker processes (the master forks them at start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [p.pid for p in nginx.processes()[1:]]
        if len(found) >= workers or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    # A worker not seen (yet) still gets a line, keyed by the master's pid and its index.
    return (found + [-(nginx.pid * 100 + i) for i in range(workers)])[:workers]


def emit_lines(lines: list[dict[str, Any]]) -> None:
    """Write telemetry lines to stdout (one JSON object a line), flushed at once."""
    sys.stdout.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    sys.stdout.flush()

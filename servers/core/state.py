"""Framework-neutral server state: counters, tick lag, GC timing, telemetry, records.

Framework modules own only what their framework makes different (routing, sockets,
timers, the WebSocket API); everything that must be identical across servers is here.
Nothing in this module blocks or imports a framework.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from servers import contract

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Resident set size of this process, read from /proc (cheap enough for every second)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except OSError:
        return 0


class ServerState:
    """Per-process counters and the telemetry line built from them.

    Framework code bumps the plain integer attributes directly on its hot path
    (`state.requests += 1`): attribute increments cost nothing next to a method call.
    """

    def __init__(self, framework: str, loop: str, worker: int = 0) -> None:
        self.framework = framework
        self.loop = loop
        self.worker = worker
        self.port = 0
        self.mc_port = 0  # the --mc-socket-port socket service's port; 0 when not serving
        self.open = 0
        self.max_open = 0
        self.requests = 0
        self.messages = 0
        self.bad = 0
        self.stored = 0
        self.sink_errors = 0
        self.backlog = 0
        self.backend_errors = 0  # memcached or GridFS reads that failed (answered 503)
        self.seq = 0
        # records' ids: unique across the workers of one server and the instances of lb:N
        self._id_prefix = f"{worker}-{os.getpid()}-"
        self._tick_last: float | None = None
        self._tick_lag_sum_s = 0.0
        self._tick_lag_max_s = 0.0
        self._tick_count = 0
        self.gc_collections = 0
        self._gc_pause_s = 0.0
        self._gc_started: float | None = None
        gc.callbacks.append(self._on_gc)

    # -- connections ---------------------------------------------------------------
    def connection_opened(self) -> None:
        self.open += 1
        if self.open > self.max_open:
            self.max_open = self.open

    def connection_closed(self) -> None:
        self.open -= 1

    def counter_payload(self) -> bytes:
        """The body of `GET /counter`."""
        return json.dumps(
            {"open": self.open, "max_open": self.max_open, "requests": self.requests}
        ).encode()

    # -- records -------------------------------------------------------------------
    def make_record(
        self, method: str, path: str, headers: dict[str, str], body: str
    ) -> dict[str, Any]:
        """One sink record (`/log` request or `/ws` message), numbered in arrival order."""
        self.seq += 1
        return {
            "id": f"{self._id_prefix}{self.seq}",
            "seq": self.seq,
            "time": time.time(),
            "method": method,
            "path": path,
            "headers": headers,
            "body": body,
        }

    def request_record(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> dict[str, Any]:
        """A `/log` request's record. Its body is stored as UTF-8 text, each byte sequence
        that is not UTF-8 replaced by U+FFFD: a record holds text (a JSON line, a BSON
        string), and every server stores the same text for the same bytes."""
        return self.make_record(method, path, headers, body.decode("utf-8", "replace"))

    # -- event-loop lag --------------------------------------------------------------
    def tick(self) -> None:
        """Called by the framework's own 10 ms timer; the lag is the gap minus 10 ms."""
        now = time.perf_counter()
        if self._tick_last is not None:
            lag_s = now - self._tick_last - contract.TICK_INTERVAL_S
            if lag_s < 0.0:
                lag_s = 0.0
            self._tick_lag_sum_s += lag_s
            self._tick_count += 1
            if lag_s > self._tick_lag_max_s:
                self._tick_lag_max_s = lag_s
        self._tick_last = now

    # -- garbage collector -------------------------------------------------------------
    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started is not None:
            self.gc_collections += 1
            self._gc_pause_s += time.perf_counter() - self._gc_started
            self._gc_started = None

    # -- telemetry -------------------------------------------------------------------
    def telemetry(self) -> dict[str, Any]:
        """The current telemetry record; starts a new tick window."""
        tick_avg_ms = self._tick_lag_sum_s / self._tick_count * 1000.0 if self._tick_count else 0.0
        record = {
            "t": round(time.time(), 3),
            "pid": os.getpid(),
            "open": self.open,
            "max_open": self.max_open,
            "requests": self.requests,
            "messages": self.messages,
            "bad": self.bad,
            "tick_avg_ms": round(tick_avg_ms, 3),
            "tick_max_ms": round(self._tick_lag_max_s * 1000.0, 3),
            "gc_collections": self.gc_collections,
            "gc_pause_ms": round(self._gc_pause_s * 1000.0, 3),
            "stored": self.stored,
            "sink_errors": self.sink_errors,
            "backlog": self.backlog,
            "rss_bytes": rss_bytes(),
            "framework": self.framework,
            "loop": self.loop,
            "port": self.port,
            "worker": self.worker,
            "mc_port": self.mc_port,
            "backend_errors": self.backend_errors,
        }
        self._tick_lag_sum_s = 0.0
        self._tick_lag_max_s = 0.0
        self._tick_count = 0
        return record

    def emit_telemetry(self) -> None:
        """Write one telemetry line to stdout (lines under PIPE_BUF stay whole across workers)."""
        sys.stdout.write(json.dumps(self.telemetry(), separators=(",", ":")) + "\n")
        sys.stdout.flush()


class Cancellable(Protocol):
    def cancel(self) -> object: ...


# A loop's one-shot timer: asyncio's `loop.call_later`, Twisted's `reactor.callLater`.
CallLater = Callable[[float, Callable[[], None]], Cancellable]


class TelemetryTimers:
    """The 10 ms tick probe and the once-a-second telemetry line, on a loop's own timer.

    One-shot timers re-armed by their own callback (not a periodic timer, which may skip
    a late run): a late tick is the lag being measured. Green runtimes, which have no such
    timer, run the same two steps in sleeping loops (servers.runtimes.green.app).
    """

    def __init__(self, state: ServerState, call_later: CallLater) -> None:
        self._state = state
        self._call_later = call_later
        self._tick_timer: Cancellable | None = None
        self._report_timer: Cancellable | None = None

    def start(self) -> None:
        """Start both; the first telemetry line, written now, says the port is listening."""
        self._tick()
        self._report()

    def _tick(self) -> None:
        self._state.tick()
        self._tick_timer = self._call_later(contract.TICK_INTERVAL_S, self._tick)

    def _report(self) -> None:
        self._state.emit_telemetry()
        self._report_timer = self._call_later(contract.TELEMETRY_INTERVAL_S, self._report)

    def stop(self) -> None:
        """Cancel both timers (shutdown; the last telemetry line is the server's to write)."""
        for timer in (self._tick_timer, self._report_timer):
            if timer is not None:
                timer.cancel()

"""A hostile client on one connection, bounded in time and bytes, and what it cost the
server: the sending loop of verify's attack checks (harness/verify/h2_attacks.py), which
writes the same frames over and over and records how the server ended the connection (a
GOAWAY and its code, a close, a reset) or stopped reading it, with the server's CPU
seconds and RSS growth meanwhile (`ServerWatch`, over its process tree)."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from harness.verify.h2wire import FRAME_GOAWAY, H2_READ_BYTES, parse_frames
from servers import listeners

# A send that makes no progress this long means the server is not reading the connection.
STALL_S = 0.5
# After the flood: how long the client reads what the server sent, to find its GOAWAY or
# close, and how many bytes at most (a never-read flood's answers pile up unread).
DRAIN_S = 1.5
DRAIN_MAX_BYTES = 64 * 2**20
# How often the server's RSS is sampled during a flood (its growth is the peak's).
SAMPLE_EVERY_S = 0.2

# How the connection ended, as `FloodResult.ending` says it.
ENDED_GOAWAY = "goaway"
ENDED_CLOSED = "closed"
ENDED_RESET = "reset"
STOPPED_READING = "stopped-reading"
KEPT_OPEN = "kept-open"


class ServerWatch:
    """The processes serving a port (those listening on it and their descendants: nginx's
    master and workers, a supervisor's children): their CPU seconds and RSS, summed."""

    def __init__(self, port: int) -> None:
        pids: set[int] = set()
        with contextlib.suppress(psutil.Error):  # not ours to see (another user's): no figures
            for connection in psutil.net_connections(kind="tcp"):
                if (
                    connection.status == psutil.CONN_LISTEN
                    and connection.laddr.port == port
                    and connection.pid is not None
                ):
                    pids.update(listeners.tree_pids(connection.pid))
        self.processes = []
        for pid in sorted(pids):
            with contextlib.suppress(psutil.Error):
                self.processes.append(psutil.Process(pid))
        self.cpu_start_s = self.cpu_s()
        self.rss_start_bytes = self.rss_bytes()
        self.rss_peak_bytes = self.rss_start_bytes

    @property
    def found(self) -> bool:
        """Whether the server's processes are visible to this user (else no figures)."""
        return bool(self.processes)

    def cpu_s(self) -> float:
        """User and system CPU seconds of the processes so far."""
        total = 0.0
        for process in self.processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total

    def rss_bytes(self) -> int:
        """The processes' resident memory now."""
        total = 0
        for process in self.processes:
            with contextlib.suppress(psutil.Error):
                total += process.memory_info().rss
        return total

    def sample(self) -> None:
        """Note the RSS now, for the peak."""
        self.rss_peak_bytes = max(self.rss_peak_bytes, self.rss_bytes())

    def cpu_used_s(self) -> float:
        """CPU seconds since the watch began."""
        return self.cpu_s() - self.cpu_start_s

    def rss_growth_bytes(self) -> int:
        """The RSS peak seen above the RSS when the watch began."""
        self.sample()
        return max(0, self.rss_peak_bytes - self.rss_start_bytes)


@dataclass(frozen=True)
class Flood:
    """What one attack writes: `opening` once after the preface, then `unit` over and over
    (`unit(i)`: the i-th, the same length every time; its frames count as one unit)."""

    opening: bytes
    unit: Callable[[int], bytes]
    reads: bool  # whether the attacker reads the server's frames while it floods
    units_per_batch: int = 512


@dataclass(frozen=True)
class FloodResult:
    """What the server did with one flood."""

    ending: str  # ENDED_GOAWAY, ENDED_CLOSED, ENDED_RESET, STOPPED_READING, KEPT_OPEN
    goaway_code: int | None  # the GOAWAY's error code, when one came
    units_sent: int  # whole units written before the end was seen
    bytes_sent: int
    duration_s: float  # from the first unit to the end seen (or the flood's deadline)

    @property
    def ended(self) -> bool:
        """Whether the server ended the connection (a GOAWAY, a close or a reset)."""
        return self.ending in (ENDED_GOAWAY, ENDED_CLOSED, ENDED_RESET)


class _Reader:
    """The server's side of the connection as read: its GOAWAY's code, and whether it
    closed (keeping no frame but GOAWAY's)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.goaway_code: int | None = None
        self.closed = False
        self.reset = False
        self.read_bytes = 0

    def feed(self, data: bytes) -> None:
        self.read_bytes += len(data)
        frames, self.buffer = parse_frames(self.buffer + data)
        for frame in frames:
            if frame.frame_type == FRAME_GOAWAY and self.goaway_code is None:
                self.goaway_code = frame.goaway_error

    def read_once(self, sock: socket.socket) -> None:
        """One read (the socket's timeout bounds it)."""
        try:
            data = sock.recv(H2_READ_BYTES)
        except (TimeoutError, ssl.SSLWantReadError, BlockingIOError):
            return
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            self.reset = True
            return
        if not data:
            self.closed = True
        self.feed(data)

    def poll(self, sock: socket.socket) -> None:
        """Read what is there now, without waiting."""
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0
        while not self.done and (pending or select.select([sock], [], [], 0)[0]):
            self.read_once(sock)
            pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0

    def drain(self, sock: socket.socket, wait_s: float = DRAIN_S) -> None:
        """Read until a GOAWAY, a close, DRAIN_MAX_BYTES or `wait_s`."""
        deadline = time.monotonic() + wait_s
        while not self.done and self.read_bytes < DRAIN_MAX_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            sock.settimeout(remaining)
            before = self.read_bytes
            self.read_once(sock)
            if self.read_bytes == before and not self.done:
                return  # the wait passed with nothing more

    @property
    def done(self) -> bool:
        return self.goaway_code is not None or self.closed or self.reset


def flood(
    sock: socket.socket,
    attack: Flood,
    duration_s: float,
    max_bytes: int,
    on_tick: Callable[[float], None],
) -> FloodResult:
    """Write `attack` on `sock` (the preface already sent) until the server ends the
    connection, `duration_s` passes or `max_bytes` are written; `on_tick(elapsed_s)` is
    called every SAMPLE_EVERY_S (sampling, a second client). Returns what the server did."""
    reader = _Reader()
    sock.settimeout(STALL_S)
    unit_bytes = len(attack.unit(0))
    start = last_tick = last_progress = time.monotonic()
    sent = pending_from = 0
    batch = attack.opening
    opening_bytes = len(batch)
    broken = False
    while (now := time.monotonic()) - start < duration_s and sent < max_bytes:
        if now - last_tick >= SAMPLE_EVERY_S:
            on_tick(now - start)
            last_tick = now
        if pending_from >= len(batch):
            first = max(0, (sent - opening_bytes) // unit_bytes)
            batch = b"".join(attack.unit(first + i) for i in range(attack.units_per_batch))
            pending_from = 0
        try:
            written = sock.send(batch[pending_from : pending_from + H2_READ_BYTES])
        except (TimeoutError, ssl.SSLWantWriteError):
            written = 0
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            broken = True
            break
        if written:
            last_progress = time.monotonic()
        sent += written
        pending_from += written
        if attack.reads:
            reader.poll(sock)
            if reader.done:
                break
    duration = time.monotonic() - start
    stalled = time.monotonic() - last_progress >= 2 * STALL_S
    reader.drain(sock)
    if reader.goaway_code is not None:
        ending = ENDED_GOAWAY
    elif reader.closed:
        ending = ENDED_CLOSED
    elif reader.reset or broken:
        ending = ENDED_RESET
    else:
        ending = STOPPED_READING if stalled else KEPT_OPEN
    units = max(0, (sent - opening_bytes) // unit_bytes)
    return FloodResult(ending, reader.goaway_code, units, sent, duration)

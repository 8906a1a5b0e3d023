"""`python -m drivers.agent ...`: one agent process opening WebSocket connections to /ws.

It follows a schedule of connection targets (one per ramp step): open connections at
`--open-rate` per second until the step's target, hold for `--hold`, then the next step.
With `--hold-together` it reports `ready` at each target and holds only once released
(SIGUSR1, sent by the harness when every agent of the ramp is ready at that step): the
agents of a fleet, which reach a target at different times, then hold each step together.
Every open connection sends a JSON message every uniform(low, high) seconds when a payload
is given. Once a second it prints one JSON line (counters, its own CPU and RSS), and it
stops by itself at `--time-limit`.

At its end (the schedule done, `--time-limit`, or SIGTERM) it prints a `closing` line, then
closes every connection as `--close` says — `orderly`: a close frame and a FIN on each, in
order, in one loop turn; `drop`: the process exits at once and the kernel closes every
socket together, as when a client process is killed — and a `final` line (`drop`: printed
before the exit, its `open` the connections it dropped).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import resource
import signal
import sys
import time

from drivers.agent.client import (
    AgentConnection,
    AgentCounters,
    handshake_request,
    open_connection,
    text_frame,
)
from drivers.agent.payloads import PAYLOADS
from model.ramps import CLOSE_MODES

MAX_HANDSHAKES_IN_FLIGHT = 512
OPEN_TICK_S = 0.001  # the shortest sleep between attempts (batches them at high rates)
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def _rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * _PAGE_SIZE


class Agent:
    """Opens, holds and feeds connections; reports once a second."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.counters = AgentCounters()
        self.connections: list[AgentConnection] = []
        self.request = handshake_request(
            args.host, args.port, args.path, args.origin, args.subprotocol
        )
        self.subprotocol = args.subprotocol.encode()
        self.frame = text_frame(PAYLOADS[args.payload]) if args.payload != "none" else None
        self.interval = tuple(float(v) for v in args.interval.split(","))
        # several local addresses, used in turn: fewer connections per address keep the
        # kernel's source-port search short
        self.sources = args.source.split(",") if args.source else []
        self.step = -1
        self.phase = "starting"
        self.attempts = 0
        self._last_cpu = self._cpu_s()
        self._last_t = time.monotonic()
        self._stopping = asyncio.Event()
        self.closing_t: float | None = None  # when it began closing its connections
        # what ended it: "schedule" (its last hold), "signal" (told to), "time-limit"
        self.stopped_by: str | None = None
        # --hold-together: the step the harness released last (SIGUSR1: "hold now")
        self.released_step = -1
        self._released = asyncio.Event()

    @staticmethod
    def _cpu_s() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    # -- reporting ---------------------------------------------------------------------
    def report(self, final: bool = False) -> None:
        now = time.monotonic()
        cpu = self._cpu_s()
        cpu_pct = (cpu - self._last_cpu) / max(1e-6, now - self._last_t) * 100.0
        self._last_cpu, self._last_t = cpu, now
        c = self.counters
        line = {
            "t": round(time.time(), 3),
            "pid": os.getpid(),
            "source": self.args.source,
            "step": self.step,
            "phase": "final" if final else self.phase,
            "close": self.args.close,
            "closing_t": self.closing_t,
            "target": self._target(),
            "attempts": self.attempts,
            "open": c.open,
            "opened": c.opened,
            "failed": dict(c.failed),
            "closed_by_server": dict(c.closed_by_server),
            "messages_sent": c.messages_sent,
            "send_errors": c.send_errors,
            "cpu_pct": round(cpu_pct, 1),
            "rss_bytes": _rss_bytes(),
        }
        if self.stopped_by is not None:
            line["stopped_by"] = self.stopped_by
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def _target(self) -> int:
        return self.args.schedule[self.step] if 0 <= self.step < len(self.args.schedule) else 0

    async def _reporter(self) -> None:
        while not self._stopping.is_set():
            self.report()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), 1.0)

    # -- connections -------------------------------------------------------------------
    async def _open_one(self, loop: asyncio.AbstractEventLoop, slots: asyncio.Semaphore) -> None:
        try:
            connection = await open_connection(
                loop,
                self.counters,
                self.args.host,
                self.args.port,
                self.sources[self.attempts % len(self.sources)] if self.sources else None,
                self.request,
                self.subprotocol,
            )
        finally:
            slots.release()
        if connection is None:
            return
        self.connections.append(connection)
        if self.frame is not None:
            loop.call_later(random.uniform(*self.interval), self._send, loop, connection)

    def _send(self, loop: asyncio.AbstractEventLoop, connection: AgentConnection) -> None:
        if self._stopping.is_set() or not connection.send(self.frame):  # type: ignore[arg-type]
            return
        loop.call_later(random.uniform(*self.interval), self._send, loop, connection)

    async def _open_to(
        self, target: int, loop: asyncio.AbstractEventLoop, slots: asyncio.Semaphore
    ) -> None:
        """Start attempts at the open rate until `target` attempts were made in total."""
        started = time.monotonic()
        first = self.attempts
        while self.attempts < target and not self._stopping.is_set():
            due = first + int((time.monotonic() - started) * self.args.open_rate) + 1
            while self.attempts < min(due, target):
                await slots.acquire()
                self.attempts += 1
                loop.create_task(self._open_one(loop, slots))
            # asleep until the next attempt is due (at least OPEN_TICK_S): a fixed 1 ms
            # tick cost each of 54 agents opening 15/s ~4 % of a core, 2.4 cores in all
            next_due_s = started + (self.attempts - first) / self.args.open_rate
            await asyncio.sleep(max(OPEN_TICK_S, next_due_s - time.monotonic()))
        # let the last handshakes finish before the hold starts
        for _ in range(MAX_HANDSHAKES_IN_FLIGHT):
            await slots.acquire()
        for _ in range(MAX_HANDSHAKES_IN_FLIGHT):
            slots.release()

    def _release(self) -> None:
        """SIGUSR1: the harness saw every agent ready at this step; hold it now (a release
        that comes while the step is still opening is kept for it)."""
        self.released_step = self.step
        self._released.set()

    async def _await_release(self) -> None:
        """Wait until this step is released, or the agent is told to stop (`_stop` wakes it)."""
        while self.released_step < self.step and not self._stopping.is_set():
            self._released.clear()
            await self._released.wait()

    def _stop(self, by: str) -> None:
        """Stop opening and holding; the first reason given is the one reported."""
        if self.stopped_by is None:
            self.stopped_by = by
        self._stopping.set()
        self._released.set()  # an agent waiting `ready` wakes to stop

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop, "signal")
        loop.add_signal_handler(signal.SIGUSR1, self._release)
        loop.call_later(self.args.time_limit, self._stop, "time-limit")
        reporter = loop.create_task(self._reporter())
        slots = asyncio.Semaphore(MAX_HANDSHAKES_IN_FLIGHT)
        for index, target in enumerate(self.args.schedule):
            self.step = index
            self.phase = "opening"
            self.report()  # phase changes are reported at once, not only every second
            await self._open_to(target, loop, slots)
            if self.args.hold_together and not self._stopping.is_set():
                self.phase = "ready"
                self.report()
                await self._await_release()
            if self._stopping.is_set():
                break
            self.phase = "holding"
            self.report()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.args.hold)
            if self._stopping.is_set():
                break
        self._stop("schedule")
        await reporter
        self.phase = "closing"
        self.closing_t = round(time.time(), 3)
        self.report()  # the harness's closing step starts from this line's time
        if self.args.close == "drop":
            self.report(final=True)
            # every socket closed by the kernel at once, as a killed client's are: no close
            # frame, no Python close per connection
            os._exit(0)
        for connection in self.connections:
            connection.close()
        await asyncio.sleep(0.2)  # let the close frames go out
        self.report(final=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m drivers.agent", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/ws")
    parser.add_argument("--origin", default="agent")
    parser.add_argument("--subprotocol", default="myprotocol")
    parser.add_argument("--source", help="local addresses to connect from: 127.0.0.2,127.0.0.3")
    parser.add_argument(
        "--schedule",
        required=True,
        help="connection targets for this process, one per step: 1000,2000",
    )
    parser.add_argument("--hold", type=float, default=15.0, help="seconds held at each target")
    parser.add_argument(
        "--hold-together",
        action="store_true",
        help="at each target report `ready` and hold only once released by SIGUSR1",
    )
    parser.add_argument("--open-rate", type=float, default=200.0, help="connections per second")
    parser.add_argument("--interval", default="3,6", help="seconds between messages: low,high")
    parser.add_argument("--payload", choices=("none", *PAYLOADS), default="none")
    parser.add_argument("--time-limit", type=float, required=True, help="stop by itself after")
    parser.add_argument(
        "--close",
        choices=CLOSE_MODES,
        default="orderly",
        help="at the end: close each connection (orderly) or exit and let the kernel drop all",
    )
    args = parser.parse_args(argv)
    try:
        args.schedule = [int(v) for v in args.schedule.split(",")]
        low, high = (float(v) for v in args.interval.split(","))
    except ValueError:
        parser.error("--schedule takes integers and --interval two numbers: 1000,2000 and 3,6")
    decreasing = any(b < a for a, b in itertools.pairwise(args.schedule))
    if decreasing or not 0 < low <= high:
        parser.error("--schedule must not decrease, and --interval must be 0 < low <= high")
    return args


def main() -> None:
    args = parse_args(sys.argv[1:])
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(Agent(args).run())


if __name__ == "__main__":
    main()

"""The green runtime on gevent: gevent's primitives as a `GreenRuntime`, for our gevent
server (servers.frameworks.gevent) and the gunicorn-gevent contender
(servers.contenders.wsgi) alike. Import this module only after monkey-patching.
"""

from __future__ import annotations

from collections.abc import Callable

import gevent
from gevent.event import Event
from gevent.queue import Queue
from gevent.threadpool import ThreadPool

from servers.runtimes.green.sinks import GreenRuntime


def _call_later(seconds: float, function: Callable[[], None]) -> Callable[[], None]:
    """`function` on the hub after `seconds` (GreenRuntime.call_later); returns its cancel."""
    timer = gevent.get_hub().loop.timer(seconds)
    timer.start(function)
    return timer.close


def gevent_runtime() -> tuple[GreenRuntime, ThreadPool]:
    """gevent's primitives, and the pool they run real-thread work on: the file sink's
    writes go to its one thread, their results back to the waiting greenlet (kill the
    pool at shutdown, after the sink closed)."""
    threads = ThreadPool(1)
    runtime = GreenRuntime(
        spawn=gevent.spawn,
        event=Event,
        run_in_thread=lambda function, *args: threads.apply(function, args),
        queue=Queue,
        call_later=_call_later,
    )
    return runtime, threads


# WebSocket sessions woken by their sockets that work on in the turn that woke them
# (TurnShare); the others continue from gevent's callbacks. Deferring costs a green
# thread one switch, so the share is small: at 3,000 connections closed at once (busy
# machine) 32 a turn read tick max 22-42 ms dropped (3 runs), 34-131 ms in order (6 runs,
# median 55), where 256 (servers.core.turns.READY_SOCKETS_PER_TURN) read 36-46 and 71-95.
WORKING_PER_TURN = 32


class TurnShare:
    """Bounds the green threads woken by their sockets that work in one turn of gevent's
    loop (`GreenConnection.share_turn`).

    libev wakes every ready socket's green thread in one turn, each running until it waits
    again, and gevent's loop has no bound to give it (libev's event array grows to what a
    turn found: 64, 130, 262, 680, then 1,704 woken in one turn of a storm of 3,000); so
    past WORKING_PER_TURN in a turn a woken green thread waits for gevent's callbacks,
    which gevent runs in slices of its switch interval (5 ms) with the timers — the tick
    probe — between them. The wakes themselves stay in the turn. Tick max at the closing
    step of 3,000 idle WebSocket connections, on the 2-core machine with a test suite
    beside it (indicative): dropped at once 56-107 → 22-42 ms, closed in order by the
    client 149-236 → 34-131 ms (median 55).
    """

    def __init__(self, per_turn: int = WORKING_PER_TURN) -> None:
        self._loop = gevent.get_hub().loop
        self._per_turn = per_turn
        self._iteration = -1
        self._woken = 0

    def __call__(self) -> None:
        iteration = self._loop.iteration
        if iteration != self._iteration:  # a new turn: a new share
            self._iteration = iteration
            self._woken = 0
        self._woken += 1
        if self._woken > self._per_turn:
            gevent.sleep(0)  # resumes from the loop's callbacks

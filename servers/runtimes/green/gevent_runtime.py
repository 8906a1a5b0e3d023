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

"""The slow-client deadlines on a green connection (docs/contract.md, "Slow clients").

A connection's green thread says which deadline it is under as it goes: waiting for a
request head (from the connection's opening or its previous response's end), reading a
body (from the end of its head), or neither (the server is busy: routing, the sink, a
backend, writing). A client that misses its deadline gets `ClientTimeout` thrown into the
green thread wherever it waits to read; the runtime then closes the connection.

Why not a `gevent.Timeout` / `eventlet.Timeout` around each read: starting and cancelling
one costs 2 µs on gevent's hub and 5 µs on eventlet's (measured, a reused Timeout), a few
percent of a keep-alive `GET /`, paid on every request although almost none is late.
Here moving a deadline costs a clock read, and one hub timer per connection is moved
lazily: it wakes once every min(head, body) seconds, or at the deadline when that is
nearer, and then either throws (the deadline has passed) or sleeps again. A deadline is
thus kept on time, not up to a period late.

The green thread must not wait on anything but its client while under a deadline (it
reads the head or the body there, nothing else), so the exception lands in a read.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import greenlet

from servers.contract import ServerOptions

# call_later(seconds, fn): run fn on the hub (not in a green thread of its own) after
# `seconds`; returns a function that cancels it. Each framework supplies its hub's timer.
CallLater = Callable[[float, Callable[[], None]], Callable[[], None]]


class ClientTimeout(TimeoutError):
    """Thrown into a connection's green thread when its client missed a deadline.

    A `TimeoutError` (socket.timeout), as a socket read with a timeout raises: pywsgi and
    eventlet.wsgi already close a connection quietly on one while reading a request line,
    eventlet while reading the headers too (pywsgi needs a hook there).
    """


class ClientDeadlines:
    """One connection's head and body deadlines, kept by one lazily moved hub timer.

    Made in the connection's own green thread (the one a missed deadline interrupts),
    under the head deadline; `stop` it when the connection ends or is taken over.
    """

    __slots__ = (
        "_body_s",
        "_call_later",
        "_cancel",
        "_check_every_s",
        "_deadline",
        "_green_thread",
        "_head_s",
    )

    def __init__(
        self,
        *,
        call_later: CallLater,
        head_timeout_s: float,
        body_timeout_s: float,
    ) -> None:
        self._green_thread = greenlet.getcurrent()
        self._call_later = call_later
        self._head_s = head_timeout_s
        self._body_s = body_timeout_s
        # Never sleep past the shortest deadline: one set while asleep is then still seen.
        self._check_every_s = min(head_timeout_s, body_timeout_s)
        self._deadline: float | None = time.monotonic() + head_timeout_s
        self._cancel: Callable[[], None] | None = call_later(head_timeout_s, self._check)

    def await_head(self) -> None:
        """A whole request head is due within the head timeout from now."""
        self._deadline = time.monotonic() + self._head_s

    def await_body(self) -> None:
        """The request's whole body is due within the body timeout from now."""
        self._deadline = time.monotonic() + self._body_s

    def server_busy(self) -> None:
        """Nothing is due from the client until the next `await_head` or `await_body`."""
        self._deadline = None

    def stop(self) -> None:
        """No deadlines any more: the connection ended, or a WebSocket took it over."""
        self._deadline = None
        if self._cancel is not None:
            self._cancel()
            self._cancel = None

    def _check(self) -> None:
        """The hub timer: throw if the deadline passed, else sleep until it is due."""
        self._cancel = None
        deadline = self._deadline
        now = time.monotonic()
        if deadline is None or now < deadline:
            wait_s = self._check_every_s if deadline is None else deadline - now
            self._cancel = self._call_later(min(wait_s, self._check_every_s), self._check)
            return
        if not self._green_thread.dead:  # a dead one would pass it on to the hub
            self._green_thread.throw(ClientTimeout("the client missed its deadline"))


def deadlines_factory(
    options: ServerOptions, call_later: CallLater
) -> Callable[[], ClientDeadlines]:
    """What a framework calls in each new connection's green thread: its deadlines, by the
    contract's timeouts as `options` set them, on the framework's hub timer."""
    return functools.partial(
        ClientDeadlines,
        call_later=call_later,
        head_timeout_s=options.head_timeout_s,
        body_timeout_s=options.body_timeout_s,
    )

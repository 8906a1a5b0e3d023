"""The green runtime's slow-client deadlines (servers.runtimes.green.deadlines), driven
in-process: real greenlets, and a hand-cranked timer in place of the hub's, so each test
decides when the timer fires. The deadlines are short, and passed by sleeping past them."""

from __future__ import annotations

import time
from collections.abc import Callable

import greenlet
import pytest

from servers.runtimes.green.deadlines import ClientDeadlines, ClientTimeout

HEAD_S = 0.05
BODY_S = 0.08


class HandTimer:
    """`call_later` whose callbacks run when the test says: the hub's role."""

    def __init__(self) -> None:
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self.cancelled = 0

    def call_later(self, seconds: float, function: Callable[[], None]) -> Callable[[], None]:
        entry = (seconds, function)
        self.pending.append(entry)

        def cancel() -> None:
            self.pending.remove(entry)
            self.cancelled += 1

        return cancel

    def fire(self) -> float:
        """Run the one pending callback; the delay it had been scheduled with."""
        assert len(self.pending) == 1, self.pending
        seconds, function = self.pending.pop()
        function()
        return seconds


def connection(timer: HandTimer, phase: str) -> tuple[greenlet.greenlet, list[str]]:
    """A green thread that makes its deadlines, enters `phase`, then waits to be woken as
    a read would (a switch back to the test, standing in for the hub); what happened to
    it is recorded."""
    outcome: list[str] = []

    def run() -> None:
        deadlines = ClientDeadlines(
            call_later=timer.call_later, head_timeout_s=HEAD_S, body_timeout_s=BODY_S
        )
        getattr(deadlines, phase)()
        try:
            while True:
                greenlet.getcurrent().parent.switch(deadlines)
        except ClientTimeout:
            outcome.append("timed out")

    return greenlet.greenlet(run), outcome


def test_a_missed_head_deadline_throws_into_the_waiting_green_thread() -> None:
    timer = HandTimer()
    thread, outcome = connection(timer, "await_head")
    thread.switch()
    time.sleep(HEAD_S * 1.5)
    timer.fire()
    assert outcome == ["timed out"] and thread.dead and timer.pending == []


def test_a_missed_body_deadline_throws_too() -> None:
    timer = HandTimer()
    thread, outcome = connection(timer, "await_body")
    thread.switch()
    time.sleep(BODY_S * 1.5)
    timer.fire()
    assert outcome == ["timed out"] and thread.dead


def test_a_busy_server_is_never_timed_out() -> None:
    """Server time does not count: the timer only sleeps again, never past the shortest
    timeout (a head deadline set meanwhile is then seen in time)."""
    timer = HandTimer()
    thread, outcome = connection(timer, "server_busy")
    thread.switch()
    time.sleep(BODY_S * 1.5)
    assert timer.fire() == HEAD_S  # the first arming, at the opening
    assert timer.fire() == min(HEAD_S, BODY_S)
    assert outcome == [] and not thread.dead
    thread.throw(greenlet.GreenletExit)


def test_a_moved_deadline_is_slept_up_to_not_thrown() -> None:
    """A deadline that moved (a new request) makes the timer sleep until it is due."""
    timer = HandTimer()
    thread, outcome = connection(timer, "await_head")
    deadlines = thread.switch()
    time.sleep(HEAD_S * 0.6)
    deadlines.await_head()  # the next request's head, due HEAD_S from now
    time.sleep(HEAD_S * 0.6)  # past the first deadline, not the second
    timer.fire()
    assert outcome == [] and 0 < timer.pending[0][0] <= HEAD_S
    time.sleep(HEAD_S)
    timer.fire()
    assert outcome == ["timed out"]


@pytest.mark.parametrize("phase", ["await_head", "await_body", "server_busy"])
def test_stop_cancels_the_timer(phase: str) -> None:
    """A connection that ends, or a WebSocket taking it over, is never timed out."""
    timer = HandTimer()
    thread, outcome = connection(timer, phase)
    deadlines = thread.switch()
    deadlines.stop()
    deadlines.stop()  # twice: the WebSocket's, then the connection's end
    assert timer.pending == [] and timer.cancelled == 1 and outcome == []
    thread.throw(greenlet.GreenletExit)

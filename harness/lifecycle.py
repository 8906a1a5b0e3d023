"""How the harness stops: Ctrl-C, SIGTERM and SIGHUP alike, and no child left behind.

Every command runs inside `signals_as_interrupts()`. The first of SIGINT, SIGTERM or
SIGHUP raises `Interrupted` (a KeyboardInterrupt) in the main thread, so every cleanup
path written for Ctrl-C runs for all three: cases stop their servers and drivers, services
stop, temporary directories are removed, run.json says `interrupted`. Further signals
while that cleanup runs (it is bounded by its own timeouts) are noted, not raised, so a
second Ctrl-C cannot cut a cleanup short. The exit status is 128 + the signal's number.

Children are also tied to the harness by a parent-death signal (drivers.processes.spawn),
for the deaths no handler sees (SIGKILL, the OOM killer). `kill_leftover_children` is the
last check on the way out: a child still running there is a bug, killed and named.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import psutil

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The harness was asked to stop by a signal (Ctrl-C is SIGINT)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def interrupt_reason(error: BaseException) -> str:
    """`SIGTERM`, `SIGHUP`, or `Ctrl-C (SIGINT)`: what stopped the harness, for run.json."""
    if isinstance(error, Interrupted) and error.signum != signal.SIGINT:
        return f"stopped by {signal.Signals(error.signum).name}"
    return "stopped by Ctrl-C (SIGINT)"


def interrupt_exit_status(error: BaseException) -> int:
    """128 + the signal's number (130 for Ctrl-C)."""
    return error.exit_status if isinstance(error, Interrupted) else 128 + signal.SIGINT


@dataclass
class Stopping:
    """What `signals_as_interrupts` saw: the first stop signal, and how many came."""

    signum: int | None = None
    count: int = 0


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # after a hang-up, stderr may be gone
        print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[Stopping]:
    """SIGINT, SIGTERM and SIGHUP raise `Interrupted` once; later ones do not interrupt
    the cleanup. The previous handlers are restored on the way out."""
    stopping = Stopping()

    def handle(signum: int, _frame: object) -> None:
        stopping.count += 1
        if stopping.signum is None:
            stopping.signum = signum
            raise Interrupted(signum)
        _say(f"harness: {signal.Signals(signum).name}: already stopping, cleaning up")

    previous = {signum: signal.signal(signum, handle) for signum in STOP_SIGNALS}
    try:
        yield stopping
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def kill_leftover_children() -> list[str]:
    """Kill (and reap) every descendant still running; their command lines (none, unless
    a cleanup path has a bug)."""
    left: list[str] = []
    with contextlib.suppress(psutil.Error):
        children = psutil.Process().children(recursive=True)
        for child in children:
            with contextlib.suppress(psutil.Error):
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                left.append(" ".join(child.cmdline()) or child.name())
                child.kill()
        psutil.wait_procs(children, timeout=2)
    return left

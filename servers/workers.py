"""Worker processes on one port: `count` SO_REUSEPORT listening sockets opened before the
fork (nothing imported that patches or starts a loop), one forked worker per socket, and a
supervisor that forwards SIGTERM/SIGINT and ends the rest when one ends first.

Used by our servers (`python -m servers NAME --workers N`) and by the minimal WebSocket
servers (`python -m servers.minimal NAME --ws --workers N`), so both hold connections
beyond one process's open-file limit the same way.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence

from servers.contract import LISTEN_BACKLOG


def open_listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one port (SO_REUSEPORT when more than one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners: list[socket.socket] = []
    for _ in range(count):
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if count > 1:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Inherited by accepted sockets: no 40 ms delayed-ACK stalls (docs/contract.md).
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
        port = listener.getsockname()[1]
        listeners.append(listener)
    return listeners


def die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when `parent` dies (Linux prctl)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such signal
        ctypes.CDLL(None).prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the prctl
        os.kill(os.getpid(), signum)


def supervise(
    sockets: Sequence[Sequence[socket.socket | None]],
    serve_worker: Callable[[int], None],
) -> int:
    """Fork one worker per entry of `sockets` (worker i keeps `sockets[i]`, every other is
    closed in it) to run `serve_worker(i)`; forward SIGTERM/SIGINT; exit 0 when all exit 0.

    A worker that ends before a stop was asked for (killed, crashed, or exited) ends the
    server at once: the others are stopped and the exit status is 1.
    """
    supervisor = os.getpid()
    every = [one for mine in sockets for one in mine if one is not None]
    running: dict[int, int] = {}  # pid → worker index
    for worker, mine in enumerate(sockets):
        pid = os.fork()
        if pid == 0:
            die_with_parent(supervisor)
            for other in every:
                if other not in mine:
                    other.close()
            code = 0
            try:
                serve_worker(worker)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
                if not isinstance(stop.code, int) and stop.code is not None:
                    print(stop.code, file=sys.stderr)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)
        running[pid] = worker
    for one in every:
        one.close()
    stopping = False

    def stop_workers(signum: int) -> None:
        for child in list(running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        stop_workers(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    while running:
        try:
            pid, status = os.wait()  # whichever worker ends first, at once
        except ChildProcessError:
            break
        worker = running.pop(pid, None)
        if worker is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, int(code != 0))
        if not stopping:
            stopping, worst = True, 1
            how = (
                f"was killed by {signal.Signals(-code).name}"
                if code < 0
                else f"exited with status {code}"
            )
            print(
                f"servers: worker {worker} (pid {pid}) {how}: stopping the other workers",
                file=sys.stderr,
                flush=True,
            )
            stop_workers(signal.SIGTERM)
    return worst

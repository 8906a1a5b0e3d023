"""What a server leaves outside its process group when it daemonizes (a double fork and
setsid, `setsid -f`, `--daemon`), which killing the group does not reach: found by the
token in its environment (SERVER_TOKEN_ENV), or by listening on its port, and stopped."""

from __future__ import annotations

import contextlib
import os

import psutil

from harness.services.leftovers import stop_processes
from servers import listeners

SERVER_TOKEN_ENV = "SERVERBENCH_SERVER_TOKEN"  # each server's own: what escaped carries it
ESCAPED_STOP_S = 3.0  # for an escaped process to obey SIGTERM before SIGKILL


def describe(process: psutil.Process) -> str:
    """A process as an error names it: its pid and command line."""
    try:
        return f"pid {process.pid} ({' '.join(process.cmdline()) or process.name()})"
    except psutil.Error:
        return f"pid {process.pid}"


def escaped_processes(
    token: str, group: int, port: int = 0, started_at: float = 0.0
) -> list[psutil.Process]:
    """The processes of a server that are outside its process group `group` (which its
    stop killed): those whose environment has `token`, and those started since
    `started_at` that listen on `port` (0: none looked for). Never this process."""
    found: dict[int, psutil.Process] = {}

    def outside_group(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) != group
        except (psutil.Error, OSError):
            return False

    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if process.environ().get(SERVER_TOKEN_ENV) == token and outside_group(process):
                found[process.pid] = process
    if port:
        for pid in listeners.other_listeners({port}, {os.getpid()}).values():
            if pid is None or pid in found:
                continue
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                # started before the server: another program's, never ours to stop
                if process.create_time() >= started_at - 1.0 and outside_group(process):
                    found[pid] = process
    return sorted(found.values(), key=lambda process: process.pid)


def stop_escaped(token: str, group: int, port: int = 0, started_at: float = 0.0) -> list[str]:
    """Stop what escaped a server's process group (`escaped_processes`), SIGTERM then
    SIGKILL; what was stopped, named."""
    escaped = escaped_processes(token, group, port, started_at)
    names = [describe(process) for process in escaped]
    if escaped:
        stop_processes(escaped, ESCAPED_STOP_S)
    return names

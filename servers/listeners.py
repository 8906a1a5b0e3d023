"""Which TCP ports a process listens on, as the kernel says, not as a connect suggests.

"Something answered on port P" cannot tell our process from another one that holds the
port (picked free, closed, taken meanwhile; or shared through SO_REUSEPORT). psutil matches
a process's own descriptors against the kernel's socket table (/proc/PID/fd against
/proc/net/tcp), so readiness asks whether *our* process holds the listening socket, and
whether anyone else listens on the same port. Plain Python (psutil): the harness uses it
for the services it starts, the nginx wrapper for nginx.
"""

from __future__ import annotations

import http.client
import socket
from collections.abc import Collection, Iterable

import psutil


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free on `host` right now (bound, then released), for a
    program that cannot listen on port 0 and say which it got (nginx, a server given as a
    command): readiness then checks that the program holds it, alone."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def http_answers(host: str, port: int, path: str = "/", timeout_s: float = 1.0) -> bool:
    """Whether an HTTP GET of `path` gets any response at all (status does not matter)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("GET", path)
        connection.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def tree_pids(pid: int) -> list[int]:
    """`pid` and its descendants (nginx's workers, a taskset'ed child); [] once it is gone."""
    try:
        process = psutil.Process(pid)
        return [pid, *(child.pid for child in process.children(recursive=True))]
    except psutil.Error:
        return []


def listening_ports(pids: Iterable[int], host: str | None = None) -> set[int]:
    """The TCP ports on which one of `pids` holds a listening socket (on `host` if given)."""
    ports: set[int] = set()
    for pid in pids:
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        ports.update(
            connection.laddr.port
            for connection in connections
            if connection.status == psutil.CONN_LISTEN
            and (host is None or connection.laddr.ip == host)
        )
    return ports


def other_listeners(
    ports: Collection[int], pids: Collection[int], root: int | None = None
) -> dict[int, int | None]:
    """Listeners on `ports` held by a process not in `pids` (nor, with `root`, descended
    from it: a worker forked after `pids` was read — nginx's, a supervisor's — holds the
    same sockets): port -> its pid (None when this user may not see whose it is, which
    counts as someone else's)."""
    others: dict[int, int | None] = {}
    for connection in psutil.net_connections(kind="tcp"):
        if (
            connection.status == psutil.CONN_LISTEN
            and connection.laddr.port in ports
            and connection.pid not in pids
            and not (root is not None and descends_from(connection.pid, root))
        ):
            others[connection.laddr.port] = connection.pid
    return others


def descends_from(pid: int | None, root: int) -> bool:
    """Whether `pid` is `root` or one of its descendants now (a worker forked after the
    tree was last read is one: gunicorn forks its workers while it starts)."""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        return pid == root or any(parent.pid == root for parent in process.parents())
    except psutil.Error:
        return False

"""memcached from Debian, on its own loopback port, never as root (`-u nobody`)."""

from __future__ import annotations

import os
import pwd
import socket
from pathlib import Path

from harness.services.base import Service
from harness.tools import tool_path
from model.errors import UserError
from servers import scratch

MEMCACHED_USER = "nobody"  # what memcached runs as when the harness is root


def memcached_user_args() -> list[str]:
    """`-u nobody` when the harness runs as root (memcached refuses root without -u, and a
    cache the servers write to has no business holding root's rights); nothing otherwise
    (memcached changes user only when started as root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(MEMCACHED_USER)
    except KeyError:
        raise UserError(
            f"memcached would run as root: this machine has no {MEMCACHED_USER} user"
        ) from None
    return ["-u", MEMCACHED_USER]


class Memcached(Service):
    """memcached on loopback with enough connections for a pool of 50 per server worker."""

    name = "memcached"

    def __init__(self, memory_mb: int = 64) -> None:
        path = tool_path("memcached")
        if path is None:
            raise UserError("memcached not found: run `harness doctor --install`")
        # its working directory, though it writes nothing: what `harness clean` finds it
        # by when a killed run left it running (harness.services.leftovers)
        self._scratch = scratch.temporary_directory("memcached")
        try:
            self._start(path, memory_mb)
        except BaseException:
            self._scratch.cleanup()
            raise

    def _start(self, path: str, memory_mb: int) -> None:
        super().__init__(
            [
                path,
                "-l",
                "127.0.0.1",
                "-p",
                "-1",  # an ephemeral port (what memcached's own tests use); 0 turns TCP off
                "-U",
                "0",
                "-m",
                str(memory_mb),
                "-c",
                "4096",
                *memcached_user_args(),
            ],
            Path(self._scratch.name),
        )

    def stop(self) -> None:
        super().stop()
        self._scratch.cleanup()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, key: str, value: bytes) -> None:
        """Store one value with the text protocol (the memcached-proxy study's 100 bytes)."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as sock:
            sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value))
            reply = sock.recv(64)
        if reply != b"STORED\r\n":
            raise UserError(f"memcached refused set {key}: {reply!r}")

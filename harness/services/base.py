"""What every helper process of a run shares: started in its own process group, its
port read back from its own listening socket (servers.listeners: never a port picked free
and reused, never "a connect succeeded", which another process's listener would pass),
always stopped and reaped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from drivers.processes import spawn
from model.errors import UserError
from servers import listeners

READY_TIMEOUT_S = 20.0


def wait_listening(process: subprocess.Popen, name: str, host: str = "127.0.0.1") -> int:
    """The port `process` (or a child) listens on at `host`, once it does; UserError if it
    exits first, never listens, or shares the port with another process."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UserError(f"{name} exited with status {process.returncode} before listening")
        pids = listeners.tree_pids(process.pid)
        ports = listeners.listening_ports(pids, host)
        if len(ports) > 1:
            raise UserError(f"{name} listens on several ports ({sorted(ports)}), not one")
        if ports:
            others = listeners.other_listeners(ports, pids, root=process.pid)
            if others:
                raise UserError(f"{name}: another process listens on its port too: {others}")
            return ports.pop()
        time.sleep(0.05)
    raise UserError(f"{name} did not listen within {READY_TIMEOUT_S:.0f} s")


class Service:
    """A helper process in its own group; `stop()` ends the whole group."""

    name = "service"

    def __init__(self, command: list[str], workdir: Path | None = None) -> None:
        self.port = 0
        self.workdir = workdir
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives with the process)
        self.process = spawn(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self.port = wait_listening(self.process, self.name)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def output_tail(self, limit_chars: int = 500) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit_chars:]

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

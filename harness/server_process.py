"""Start, watch and stop one framework server process (`python -m servers ...`).

The server is always its own process, optionally under `taskset -c`. Its stdout carries
one JSON telemetry line per second per worker; a reader thread collects them, and the
first line of every worker is the readiness signal (it also tells the OS-chosen port).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

from drivers.processes import kill_group, spawn
from model.errors import UserError
from servers.contract import SHUTDOWN_GRACE_S

READY_TIMEOUT_S = 30.0
# Every address of the machine: a server benchmarked here never listens on one of these.
UNSPECIFIED_HOSTS = ("0.0.0.0", "::", "")


class ServerProcess:
    """A running server: its port, telemetry lines, stderr, and a clean stop.

    Use as a context manager, or call `stop()`; the process group is killed if SIGTERM
    does not end it in time, so no child is ever left behind.
    """

    def __init__(
        self, command: list[str], framework: str, workers: int, host: str = "127.0.0.1"
    ) -> None:
        self.command = command
        self.framework = framework
        self.workers = workers
        self.host = host  # the address it listens on (given explicitly: never 0.0.0.0)
        self.telemetry: list[dict[str, Any]] = []
        self.other_output: list[str] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stderr_file = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives with the process)
        self.port = 0
        # its own session (one group to kill; Ctrl-C reaches only the harness); SIGTERM if
        # the harness dies, which a server obeys by stopping its workers within the grace
        self.process = spawn(
            command, stdout=subprocess.PIPE, stderr=self._stderr_file, death_signal=signal.SIGTERM
        )
        try:
            self._reader = threading.Thread(target=self._read_stdout, daemon=True)
            self._reader.start()
        except BaseException:  # Ctrl-C right after the start: the caller never gets `self`
            self.kill()
            raise

    # -- lifecycle -------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until every worker printed its first telemetry line; raise if it died."""
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.process.poll() is not None:
                raise UserError(
                    f"{self.framework} server exited with status {self.process.returncode} "
                    f"before listening: {self.stderr_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise UserError(f"{self.framework} server did not listen within {timeout_s:.0f} s")

    def stop(self, timeout_s: float = SHUTDOWN_GRACE_S + 1.0) -> int:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL the group; returns the exit status.

        The group is killed whatever interrupts the wait (a second Ctrl-C included).
        """
        try:
            if self.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout_s)
        finally:
            self.kill()
        self._reader.join(2.0)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the whole group (workers included) and reap the server."""
        kill_group(self.process)
        self.process.wait()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- output ----------------------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        seen_workers: set[int] = set()
        for raw in self.process.stdout:
            line = raw.decode("utf-8", "replace").strip()
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict) or "pid" not in record:
                with self._lock:
                    self.other_output.append(line)
                continue
            with self._lock:
                self.telemetry.append(record)
            if not self._ready.is_set():
                seen_workers.add(record.get("worker", 0))
                self.port = self.port or int(record.get("port", 0))
                if len(seen_workers) >= self.workers:
                    self._ready.set()

    def telemetry_lines(self) -> list[dict[str, Any]]:
        """A copy of every telemetry line so far."""
        with self._lock:
            return list(self.telemetry)

    def latest_telemetry(self) -> dict[int, dict[str, Any]]:
        """The newest line of each worker process, by pid."""
        latest: dict[int, dict[str, Any]] = {}
        for record in self.telemetry_lines():
            latest[record["pid"]] = record
        return latest

    def wait_telemetry(self, predicate, timeout_s: float = 5.0) -> dict[str, Any] | None:
        """The first telemetry line (from now on or already seen) satisfying `predicate`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for record in self.telemetry_lines():
                if predicate(record):
                    return record
            time.sleep(0.05)
        return None

    def stderr_tail(self, limit_chars: int = 400) -> str:
        self._stderr_file.seek(0)
        text = self._stderr_file.read().decode("utf-8", "replace").strip()
        return text[-limit_chars:] if text else "(no output)"


def server_command(
    framework: str,
    *,
    sink: str = "empty",
    workers: int = 1,
    loop: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    cpus: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that runs `framework` behind the contract, pinned when `cpus`."""
    command = [
        sys.executable,
        "-m",
        "servers",
        framework,
        "--host",
        host,
        "--port",
        str(port),
        "--sink",
        sink,
        "--workers",
        str(workers),
    ]
    if loop:
        command += ["--loop", loop]
    command += list(extra_args)
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    return command


def start_server(
    framework: str,
    *,
    sink: str = "empty",
    workers: int = 1,
    loop: str | None = None,
    cpus: str | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = READY_TIMEOUT_S,
    host: str = "127.0.0.1",
) -> ServerProcess:
    """Start a server on an OS-chosen port of `host` (loopback unless a fleet's load hosts
    must reach it: then the address they reach, given explicitly) and wait until it listens."""
    if host in UNSPECIFIED_HOSTS:
        raise UserError(f"a server listens on an address given explicitly, not {host}")
    command = server_command(
        framework,
        sink=sink,
        workers=workers,
        loop=loop,
        host=host,
        cpus=cpus,
        extra_args=extra_args,
    )
    server = ServerProcess(command, framework, workers, host)
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.kill()
        raise
    return server

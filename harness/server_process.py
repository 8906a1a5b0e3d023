"""Start, watch and stop one framework server process (`python -m servers ...`).

The server is always its own process, optionally under `taskset -c`. Its stdout carries
one JSON telemetry line per second per worker; a reader thread collects them, and the
first line of every worker is the readiness signal (it also tells the OS-chosen port).

A server given as a command (kind `command`: `--server`, a servers file, a plugin) writes
no such line, so the harness picks a free loopback port for it, fills the command's
placeholders in (harness.server_command), and takes it as ready once its own process tree
holds the listening socket on that port (servers.listeners, as for memcached and
FerretDB: not "something answered") and `GET /` gets an HTTP answer, whatever its status.

A server speaks one protocol per start (servers.contract.PROTOCOLS): `protocol` and, for
the TLS ones, the run's `certificates` become `--protocol/--tls-cert/--tls-key` (a
command's {protocol}, {tls_cert}, {tls_key}). A command over TLS is ready once a TLS
handshake trusting the run's CA completes on its port; over h2c, once `GET /` is answered
or the HTTP/2 preface gets SETTINGS back. A framework that does not list the protocol is
refused (`protocol_unsupported`), never started on another one.

A server is stopped by killing its process group, which a command that daemonizes (a
double fork and setsid, `setsid -f`, `--daemon`) leaves. Every server therefore carries a
token of its own in its environment (SERVER_TOKEN_ENV), and `kill` then looks for what
escaped (harness.escaped_processes): a process with the token, or one started since the
server that listens on its port. Each is named (`escaped`, a warning on stderr, and the
readiness error a daemonizing command meets: its first process exits before listening)
and stopped, SIGTERM then SIGKILL.
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
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from drivers.processes import kill_group, spawn
from harness.cgroups.groups import Cgroup
from harness.escaped_processes import SERVER_TOKEN_ENV, stop_escaped
from harness.secrets import redact, server_environment
from harness.server_command import FLAG_PLACEHOLDERS as FLAG_PLACEHOLDERS
from harness.server_command import OPTION_PLACEHOLDERS as OPTION_PLACEHOLDERS
from harness.server_command import check_listen_address as check_listen_address
from harness.server_command import command_unsupported as command_unsupported
from harness.server_command import fill_command as fill_command
from harness.server_command import placeholder_values as placeholder_values
from harness.server_command import protocol_args as protocol_args
from harness.server_command import protocol_unsupported as protocol_unsupported
from harness.server_command import server_command as server_command
from harness.tls import Certificates, h2c_answers, tls_handshakes
from model.errors import UserError
from servers import FRAMEWORKS, Framework, listeners
from servers.contract import (
    PROTOCOL_H1,
    PROTOCOL_H2C,
    SHUTDOWN_GRACE_S,
    TLS_PROTOCOLS,
)

READY_TIMEOUT_S = 30.0


class ServerProcess:
    """A running server: its port, telemetry lines, stderr, and a clean stop.

    Use as a context manager, or call `stop()`; the process group is killed if SIGTERM
    does not end it in time, so no child is ever left behind.
    """

    def __init__(
        self,
        command: list[str],
        framework: str,
        workers: int,
        host: str = "127.0.0.1",
        protocol: str = PROTOCOL_H1,
        certificates: Certificates | None = None,
        environment: dict[str, str] | None = None,
        cgroup: Cgroup | None = None,
    ) -> None:
        self.command = command
        self.framework = framework
        self.workers = workers
        self.cgroup = cgroup  # the group it runs in (harness.cgroups), None: none
        self.host = host  # the address it listens on (given explicitly: never 0.0.0.0)
        self.protocol = protocol  # what it speaks on its port (servers.contract.PROTOCOLS)
        self.certificates = certificates  # what it serves over TLS (None: cleartext)
        self.telemetry: list[dict[str, Any]] = []
        self.other_output: list[str] = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stderr_file = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives with the process)
        self.port = 0
        self._reader: threading.Thread | None = None
        self.token = uuid.uuid4().hex  # in its environment: found if it escapes its group
        self.escaped: list[str] = []  # what left its process group, named and stopped
        self.started_at = time.time()
        # its own session (one group to kill; Ctrl-C reaches only the harness); SIGTERM if
        # the harness dies, which a server obeys by stopping its workers within the grace
        self.process = spawn_server(
            command, subprocess.PIPE, self._stderr_file, environment, self.token, cgroup
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
    def tls(self) -> bool:
        """Whether it speaks TLS on its port."""
        return self.protocol in TLS_PROTOCOLS

    @property
    def url(self) -> str:
        """Its base URL: https for the TLS protocols (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

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
        if self._reader is not None:
            self._reader.join(2.0)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the whole group (workers included) and reap the server; then stop what
        escaped the group (`escaped_processes`), named in `escaped` and on stderr (what is
        left in its cgroup, the cgroup's owner kills when it removes it)."""
        kill_group(self.process)
        self.process.wait()
        names = stop_escaped(self.token, self.process.pid, self.port, self.started_at)
        if names:
            self.escaped += names
            print(
                f"harness: warning: {self.framework} left its process group (daemonized): "
                f"stopped {', '.join(names)}",
                file=sys.stderr,
            )

    def escaped_note(self) -> str:
        """What escaped the group, for an error message ("" when nothing did)."""
        if not self.escaped:
            return ""
        return (
            f"; it daemonized out of the harness's process group: stopped "
            f"{', '.join(self.escaped)} (a server must stay in the foreground)"
        )

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
        """The end of its stderr, every known secret hidden (it goes into errors)."""
        self._stderr_file.seek(0)
        text = redact(self._stderr_file.read().decode("utf-8", "replace").strip())
        return text[-limit_chars:] if text else "(no output)"


class CommandServerProcess(ServerProcess):
    """A server run as a command: no telemetry line; ready once its own process tree
    listens on the port it was given and answers `GET /` (any HTTP status).

    Its stdout and stderr go to one file (access logs too, which a pipe nobody reads
    would block on); `stderr_tail` reads that.
    """

    def __init__(
        self,
        command: list[str],
        framework: str,
        workers: int,
        port: int,
        protocol: str = PROTOCOL_H1,
        certificates: Certificates | None = None,
        environment: dict[str, str] | None = None,
        cgroup: Cgroup | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.command = command
        self.cgroup = cgroup
        self.host = host  # loopback, or the address a fleet's load hosts reach
        self.protocol = protocol
        self.certificates = certificates
        self.framework = framework
        self.workers = workers
        self.telemetry = []
        self.other_output = []
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._reader = None
        self._stderr_file = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (lives with the process)
        self.port = port
        self.token = uuid.uuid4().hex
        self.escaped = []
        self.started_at = time.time()
        self.process = spawn_server(
            command, self._stderr_file, subprocess.STDOUT, environment, self.token, cgroup
        )

    def answers(self) -> bool:
        """Whether it answers in its protocol: `GET /` (any status); over TLS, a completed
        handshake trusting the run's CA; over h2c, `GET /` or SETTINGS after the preface."""
        if self.tls:
            assert self.certificates is not None  # start_command_server checked
            return tls_handshakes(self.host, self.port, self.protocol, self.certificates)
        if listeners.http_answers(self.host, self.port):
            return True
        return self.protocol == PROTOCOL_H2C and h2c_answers(self.host, self.port)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until the tree holds the listener on `port` alone and answers in its
        protocol (`answers`)."""
        deadline = time.monotonic() + timeout_s
        seen_ports: set[int] = set()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.kill()  # what it left behind: a daemon it forked is found and stopped
                raise UserError(
                    f"{self.framework} exited with status {self.process.returncode} before "
                    f"listening on {self.port}{self.escaped_note()}: {self.stderr_tail()}"
                )
            pids = listeners.tree_pids(self.process.pid)
            seen_ports = listeners.listening_ports(pids)
            if self.port in seen_ports:
                others = listeners.other_listeners({self.port}, pids, root=self.process.pid)
                if others:
                    self.kill()
                    raise UserError(
                        f"{self.framework}: another process listens on its port {self.port} "
                        f"too: {others}{self.escaped_note()}"
                    )
                if self.answers():
                    self._ready.set()
                    return
            time.sleep(0.05)
        self.kill()
        elsewhere = f" (it listens on {sorted(seen_ports)}: does the command use {{port}}?)"
        answer = {PROTOCOL_H1: "answer GET /", PROTOCOL_H2C: "answer GET / or the h2 preface"}
        raise UserError(
            f"{self.framework} did not listen on port {self.port} and "
            f"{answer.get(self.protocol, 'complete a TLS handshake')} ({self.protocol}) within "
            f"{timeout_s:.0f} s{elsewhere if seen_ports else ''}: {self.stderr_tail()}"
        )


def spawn_server(
    command: list[str],
    stdout: Any,
    stderr: Any,
    environment: dict[str, str] | None,
    token: str,
    cgroup: Any,
) -> subprocess.Popen[bytes]:
    """A server's process: its own session, SIGTERM if the harness dies (a server obeys
    by stopping its workers within the grace), its environment (child_environment) and,
    when it has one, its cgroup joined before it execs."""
    return spawn(
        command,
        stdout=stdout,
        stderr=stderr,
        death_signal=signal.SIGTERM,
        env=child_environment(environment, token),
        cgroup_procs=cgroup.procs_files if cgroup is not None else (),
    )


def child_environment(environment: dict[str, str] | None, token: str) -> dict[str, str]:
    """A server's environment: the harness's, with `environment` (its MongoDB URL:
    harness.secrets) and the server's token (SERVER_TOKEN_ENV: what finds a process that
    left its group) added."""
    return {**os.environ, **(environment or {}), SERVER_TOKEN_ENV: token}


def start_command_server(
    framework: Framework,
    template: str,
    *,
    sink: str = "empty",
    workers: int = 1,
    cpus: str | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = READY_TIMEOUT_S,
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
    cgroup: Cgroup | None = None,
    host: str = "127.0.0.1",
    environment: Mapping[str, str] | None = None,
) -> CommandServerProcess:
    """Start `template` (the command or the minimal app of `framework`) on a free port of
    `host` (loopback unless a fleet's load hosts must reach it), pinned by taskset when
    `cpus`, in `cgroup` when given, speaking `protocol` (TLS: with `certificates`), with
    `environment` added to its own, and wait until it is ready."""
    check_listen_address(host)
    port = listeners.free_port(host)
    args = [*extra_args, *protocol_args(protocol, certificates)]
    try:
        values = placeholder_values(
            host=host, port=port, sink=sink, workers=workers, extra_args=args
        )
        command = fill_command(template, values)
    except (ValueError, KeyError, IndexError, UserError) as error:
        raise UserError(f"{framework.name}: command {template!r}: {error}") from None
    # {mongo_url} fills the command's own words (on its command line, so `ps` shows it);
    # the environment gives the URL to a command that reads MONGO_URL_ENV instead
    _, secrets = server_environment(args)
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    try:
        server = CommandServerProcess(
            command, framework.name, workers, port, protocol, certificates,
            {**(environment or {}), **secrets}, cgroup, host,
        )  # fmt: skip
    except OSError as error:  # the program is not there
        raise UserError(f"{framework.name}: cannot run {redact(command[0])!r}: {error}") from None
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.kill()
        raise
    return server


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
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
    cgroup: Cgroup | None = None,
    environment: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start a server on an OS-chosen port of `host` (loopback unless a fleet's load hosts
    must reach it: then the address they reach, given explicitly) speaking `protocol`
    (the TLS ones with `certificates`: harness.tls), in `cgroup` when given (it joins
    before it execs: harness.cgroups), with `environment` added to its own (a profiled
    round's: harness.cpu_sampler), and wait until it listens (a command server: on a
    port the harness picked). UserError `not supported: …` when the framework does not
    speak `protocol`."""
    check_listen_address(host)
    registered = FRAMEWORKS.get(framework)
    if registered is not None:
        why = protocol_unsupported(registered, protocol)
        if why is not None:
            raise UserError(f"not supported: {why}")
    if registered is not None and registered.kind == "command":
        if host != "127.0.0.1":
            raise UserError(f"{framework} is a server given as a command: it runs on loopback only")
        return start_command_server(
            registered,
            registered.command,
            sink=sink,
            workers=workers,
            cpus=cpus,
            extra_args=extra_args,
            ready_timeout_s=ready_timeout_s,
            protocol=protocol,
            certificates=certificates,
            cgroup=cgroup,
            environment=environment,
        )
    # the MongoDB URL (which may hold a password) in the environment, not on `ps`
    args, secrets = server_environment([*extra_args, *protocol_args(protocol, certificates)])
    command = server_command(
        framework, sink=sink, workers=workers, loop=loop, host=host, cpus=cpus, extra_args=args
    )
    server = ServerProcess(
        command, framework, workers, host, protocol, certificates,
        {**(environment or {}), **secrets}, cgroup,
    )  # fmt: skip
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.kill()
        raise
    return server

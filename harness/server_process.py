"""Start, watch and stop one framework server process (`python -m servers ...`).

The server is always its own process, optionally under `taskset -c`. Its stdout carries
one JSON telemetry line per second per worker; a reader thread collects them, and the
first line of every worker is the readiness signal (it also tells the OS-chosen port).

A server given as a command (kind `command`: `--server`, a servers file, a plugin) writes
no such line, so the harness picks a free loopback port for it, fills the command's
placeholders in, and takes it as ready once its own process tree holds the listening
socket on that port (servers.listeners, as for memcached and FerretDB: not "something
answered") and `GET /` gets an HTTP answer, whatever its status.

A server speaks one protocol per start (servers.contract.PROTOCOLS): `protocol` and, for
the TLS ones, the run's `certificates` become `--protocol/--tls-cert/--tls-key` (a
command's {protocol}, {tls_cert}, {tls_key}). A command over TLS is ready once a TLS
handshake trusting the run's CA completes on its port; over h2c, once `GET /` is answered
or the HTTP/2 preface gets SETTINGS back. A framework that does not list the protocol is
refused (`protocol_unsupported`), never started on another one.

A server is stopped by killing its process group, which a command that daemonizes (a
double fork and setsid, `setsid -f`, `--daemon`) leaves. Every server therefore carries a
token of its own in its environment (SERVER_TOKEN_ENV), and `kill` then looks for what
escaped: a process with the token, or one started since the server that listens on its
port. Each is named (`escaped`, a warning on stderr, and the readiness error a daemonizing
command meets: its first process exits before listening) and stopped, SIGTERM then SIGKILL.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import psutil

from drivers.processes import kill_group, spawn
from harness.cgroups.groups import Cgroup
from harness.secrets import SECRET_FIELD, SecretField, redact, server_environment
from harness.services.leftovers import stop_processes
from harness.tls import Certificates, h2c_answers, tls_handshakes
from model.errors import UserError
from servers import FRAMEWORKS, SINK_PLACEHOLDERS, Framework, command_placeholders, listeners
from servers.contract import (
    GRIDFS_DATABASE,
    MONGO_BATCH_MAX_RECORDS,
    PROTOCOL_H1,
    PROTOCOL_H2C,
    PROTOCOLS,
    SHUTDOWN_GRACE_S,
    TLS_PROTOCOLS,
)
from servers.core.sinks import DEFAULT_MONGO_URL

READY_TIMEOUT_S = 30.0
SERVER_TOKEN_ENV = "SERVERBENCH_SERVER_TOKEN"  # each server's own: what escaped carries it
ESCAPED_STOP_S = 3.0  # for an escaped process to obey SIGTERM before SIGKILL


def _describe(process: psutil.Process) -> str:
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


def check_listen_address(host: str, what: str = "a server") -> str:
    """`host` when a server may listen there: one IP address written out (a name, or a
    short form such as `0` or `0.0` that the socket API reads as every address, is
    refused), neither unspecified (`0.0.0.0`, `::`, `::0`) nor multicast nor broadcast —
    a server benchmarked here never listens on every address of the machine."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(
            f"{what} listens on an IP address given explicitly (127.0.0.1, ::1, or the "
            f"address the load hosts reach), not {host!r}"
        ) from None
    broadcast = address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255")
    if address.is_unspecified or address.is_multicast or broadcast:
        raise UserError(
            f"{what} listens on one address given explicitly, never {host!r} "
            "(every address of the machine, or a group)"
        )
    return host


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
        escaped = escaped_processes(self.token, self.process.pid, self.port, self.started_at)
        if escaped:
            names = [_describe(process) for process in escaped]
            stop_processes(escaped, ESCAPED_STOP_S)
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


# The contract options (SinkStore.server_args, Backends.server_args) and the placeholders
# they fill; flags without a value are in FLAG_PLACEHOLDERS.
OPTION_PLACEHOLDERS = {
    "--sink-path": "sink_path",
    "--mongo-url": "mongo_url",
    "--mongo-w": "mongo_w",
    "--mongo-batch": "mongo_batch",
    "--mongo-db": "mongo_db",
    "--files-dir": "files_dir",
    "--memcached": "memcached",
    "--mc-socket-port": None,  # the memcached socket service: a command does not serve it
    "--protocol": "protocol",
    "--tls-cert": "tls_cert",
    "--tls-key": "tls_key",
}
FLAG_PLACEHOLDERS = {"--durable": "durable"}


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


def placeholder_values(
    *, host: str, port: int, sink: str, workers: int, extra_args: Sequence[str] = ()
) -> dict[str, Any]:
    """What each placeholder of a command stands for in this start (`{secret:NAME}`: the
    environment variable NAME, learned as a secret: harness.secrets)."""
    values: dict[str, Any] = {
        SECRET_FIELD: SecretField(),
        "python": sys.executable,
        "host": host,
        "port": str(port),
        "sink": sink,
        "sink_path": "",
        "mongo_url": DEFAULT_MONGO_URL,
        "mongo_db": GRIDFS_DATABASE,
        "mongo_w": "1",
        "mongo_batch": str(MONGO_BATCH_MAX_RECORDS),
        "durable": "0",
        "files_dir": "",
        "memcached": "127.0.0.1:11211",
        "workers": str(workers),
        "protocol": "h1",
        "tls_cert": "",
        "tls_key": "",
    }
    args = list(extra_args)
    while args:
        option = args.pop(0)
        if option in FLAG_PLACEHOLDERS:
            values[FLAG_PLACEHOLDERS[option]] = "1"
        elif option in OPTION_PLACEHOLDERS and args:
            value = args.pop(0)
            name = OPTION_PLACEHOLDERS[option]
            if name is not None:
                values[name] = value
        else:
            raise ValueError(f"no placeholder takes the server option {option!r}")
    return values


def fill_command(template: str, values: dict[str, Any]) -> list[str]:
    """The argv of a command template: split as a shell would (no shell runs it), then
    each word's placeholders filled, so a path with spaces stays one argument."""
    return [word.format(**values) for word in shlex.split(template)]


def protocol_unsupported(framework: Framework, protocol: str) -> str | None:
    """Why `framework` cannot be started on `protocol` (its why_not), or None."""
    if protocol not in PROTOCOLS:
        return f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}"
    if protocol not in framework.protocols:
        return framework.why_not(protocol)
    return None


def protocol_args(protocol: str, certificates: Certificates | None) -> list[str]:
    """The contract options that start a server on `protocol` (none for h1); UserError
    when a TLS protocol has no certificates."""
    if protocol == PROTOCOL_H1:
        return []
    if protocol not in TLS_PROTOCOLS:
        return ["--protocol", protocol]
    if certificates is None:
        raise UserError(f"protocol {protocol} needs the run's certificates (harness.tls)")
    return [
        "--protocol",
        protocol,
        "--tls-cert",
        str(certificates.cert_path),
        "--tls-key",
        str(certificates.key_path),
    ]


def command_unsupported(framework: Framework, *, sink: str, workers: int) -> str | None:
    """Why a command server cannot run this case (a sink, workers), or None."""
    names = command_placeholders(framework.command)
    if sink not in framework.sinks:
        needed = " or ".join(f"{{{name}}}" for name in SINK_PLACEHOLDERS.get(sink, ("sink",)))
        return f"{framework.name} has no {sink} sink (its command has no {{sink}} and {needed})"
    if workers > 1 and "workers" not in names:
        return f"{framework.name} runs one process only (its command has no {{workers}})"
    return None


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
) -> CommandServerProcess:
    """Start `template` (the command or the minimal app of `framework`) on a free port of
    `host` (loopback unless a fleet's load hosts must reach it), pinned by taskset when
    `cpus`, in `cgroup` when given, speaking `protocol` (TLS: with `certificates`), and
    wait until it is ready."""
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
    _, environment = server_environment(args)
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    try:
        server = CommandServerProcess(
            command, framework.name, workers, port, protocol, certificates, environment, cgroup,
            host,
        )  # fmt: skip
    except OSError as error:  # the program is not there
        raise UserError(f"{framework.name}: cannot run {redact(command[0])!r}: {error}") from None
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.kill()
        raise
    return server


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
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
    cgroup: Cgroup | None = None,
) -> ServerProcess:
    """Start a server on an OS-chosen port of `host` (loopback unless a fleet's load hosts
    must reach it: then the address they reach, given explicitly) speaking `protocol`
    (the TLS ones with `certificates`: harness.tls), in `cgroup` when given (it joins
    before it execs: harness.cgroups), and wait until it listens (a command server: on a
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
        )
    # the MongoDB URL (which may hold a password) in the environment, not on `ps`
    args, environment = server_environment([*extra_args, *protocol_args(protocol, certificates)])
    command = server_command(
        framework, sink=sink, workers=workers, loop=loop, host=host, cpus=cpus, extra_args=args
    )
    server = ServerProcess(
        command, framework, workers, host, protocol, certificates, environment, cgroup
    )
    try:
        server.wait_ready(ready_timeout_s)
    except BaseException:
        server.kill()
        raise
    return server

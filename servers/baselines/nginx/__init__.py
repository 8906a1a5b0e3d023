"""The nginx baseline (`python -m servers nginx ...`) and the nginx config helpers.

nginx has no telemetry of its own, so this wrapper renders a config into a private
temporary directory (`nginx.conf.template` plus the block helpers below), runs nginx as its
child and writes the contract's telemetry line once a second for it: open connections and
total requests come from `stub_status` on a second, loopback-only server block, RSS is the
sum over the nginx master and workers (psutil). CPU affinity is inherited, so
`taskset -c 0 python -m servers nginx ...` pins nginx too.

`--protocol` changes only the public listener (LISTEN_PARAMETERS): h1-tls and h2 serve the
given certificate over TLS 1.3 only, h2c speaks HTTP/2 to clients with prior knowledge;
the routes, the deadlines and the telemetry are the same over each.

The same helpers render the reverse proxy of the `lb:N` topology (harness/services/balancer.py),
so nginx config is written in one place. Plain Python: the harness may import this module.

With `--workers N` nginx runs N worker processes behind one stub_status, which cannot
split its counts by worker. The wrapper still writes one line per worker (the harness
waits for every worker's first line): worker 0's line carries the wrapper's pid, nginx's
totals and the master's RSS plus its worker's; worker i's line carries nginx worker i's pid
and RSS and zero counts, so summing the lines (harness/monitor.py) gives nginx's totals.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from servers import PROGRAM_PATH, contract, listeners, scratch
from servers.baselines.nginx.workloads import workload_locations, write_workload_files
from servers.contract import ServerOptions
from servers.listeners import free_port, http_answers  # nginx cannot listen on port 0

TEMPLATE_PATH = Path(__file__).resolve().parent / "nginx.conf.template"
STATUS_PATH = "/status"
# Where nginx's own 400s go to be judged (an internal URI: a named location needs a URI,
# which a request refused while parsing does not have).
BAD_REQUEST_PATH = "/.bad-request"
READY_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3  # a port picked free can be taken before nginx binds it: pick again
PORT_TAKEN = "Address already in use"
UPSTREAM_KEEPALIVE = 512  # idle connections each LB worker keeps to the instances
# An instance closes a connection idle for its head deadline (docs/contract.md, "Slow
# clients"): the balancer lets its idle upstream connections go well before that, so it
# never sends a request down one the instance is closing.
UPSTREAM_KEEPALIVE_TIMEOUT_S = contract.HEAD_TIMEOUT_S / 2
MAX_WORKER_CONNECTIONS = 65536
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


class NginxError(Exception):
    """nginx is missing, refused its config, or did not answer; the message is one line."""


# -- config rendering --------------------------------------------------------------------
def render_template(text: str, values: Mapping[str, object]) -> str:
    """Fill `{{name}}` placeholders; a placeholder without a value is an error, not a blank."""
    missing = sorted({name for name in _PLACEHOLDER.findall(text) if name not in values})
    if missing:
        raise KeyError(f"no value for template placeholder(s): {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), text)


def quote(value: str) -> str:
    """`value` as a double-quoted nginx string; nginx cannot take a literal `$` in one."""
    if "$" in value or "\n" in value or "\0" in value:
        raise ValueError(f"nginx cannot take {value!r} literally ($, newline or NUL)")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def listen_address(host: str, port: int) -> str:
    """`host:port` as nginx's `listen` wants it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# The `listen` parameters that make each protocol (nginx 1.22, Debian 12's): `ssl` for TLS,
# `http2` for HTTP/2, which over TLS nginx offers by ALPN and without TLS speaks to a client
# that sends the HTTP/2 preface first (prior knowledge; an HTTP/1.1 request is not served).
LISTEN_PARAMETERS = {
    contract.PROTOCOL_H1: "",
    contract.PROTOCOL_H1_TLS: " ssl",
    contract.PROTOCOL_H2: " ssl http2",
    contract.PROTOCOL_H2C: " http2",
}


def listen_directive(host: str, port: int, protocol: str = contract.PROTOCOL_H1) -> str:
    """A public listener for `protocol`: SO_REUSEPORT per worker and the contract's backlog."""
    if protocol not in LISTEN_PARAMETERS:
        raise ValueError(f"protocol {protocol!r} is not one of {', '.join(contract.PROTOCOLS)}")
    return (
        f"listen {listen_address(host, port)}{LISTEN_PARAMETERS[protocol]} reuseport "
        f"backlog={contract.LISTEN_BACKLOG};"
    )


def tls_directives(cert_path: str, key_path: str) -> str:
    """A server block's TLS: the given certificate and key, TLS 1.3 only (the contract's
    TLS_MINIMUM_VERSION). nginx's other TLS settings stay its defaults (session tickets on,
    no session cache), as a plain nginx TLS site has them."""
    return (
        f"ssl_certificate {quote(str(Path(cert_path).resolve()))};\n"
        f"        ssl_certificate_key {quote(str(Path(key_path).resolve()))};\n"
        "        ssl_protocols TLSv1.3;"
    )


def types_block() -> str:
    """The `types {}` entries: exactly the contract's file types, nothing else."""
    by_type: dict[str, list[str]] = {}
    for extension, mime in contract.FILE_CONTENT_TYPES.items():
        by_type.setdefault(mime, []).append(extension.lstrip("."))
    return "\n".join(f"        {mime} {' '.join(exts)};" for mime, exts in by_type.items())


def _user_directive() -> str:
    # As root, nginx would drop its workers to `nobody`, who may not read --files-dir (a
    # private temporary directory in the tests): keep the invoking user, like every other
    # server. As anyone else the directive is ignored with a warning, so leave it out.
    if os.geteuid() != 0:
        return ""
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    return f"user {user} {group};"


def render_config(run_dir: Path, blocks: str, workers: int = 1) -> str:
    """The whole nginx.conf: the template's main/events/http parts around `blocks`."""
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = 1_048_576 if nofile_hard == resource.RLIM_INFINITY else min(nofile_hard, 1_048_576)
    inner_run_dir = quote(str(run_dir))[1:-1]  # the template already has the quotes
    return render_template(
        TEMPLATE_PATH.read_text(),
        {
            "user_directive": _user_directive(),
            "workers": workers,
            "nofile": nofile,
            # Each proxied connection costs two descriptors; leave room for files.
            "worker_connections": max(1024, min(MAX_WORKER_CONNECTIONS, nofile // 2)),
            "run_dir": inner_run_dir,
            "types": types_block(),
            "default_type": contract.DEFAULT_CONTENT_TYPE,
            "blocks": blocks,
        },
    )


def nginx_time(seconds: float) -> str:
    """`seconds` as an nginx time value, in whole milliseconds (at least one: a zero
    keepalive_timeout would turn keep-alive off)."""
    return f"{max(1, round(seconds * 1000))}ms"


def client_timeout_directives(head_timeout_s: float, body_timeout_s: float) -> str:
    """The contract's slow-client deadlines as nginx has them (docs/contract.md, "Slow
    clients"), for a server block.

    client_header_timeout runs from the accept to the end of the first head: a deadline, not
    reset by a trickle. keepalive_timeout closes an idle kept-alive connection; the next
    request's head then has client_header_timeout from its first byte. client_body_timeout is
    nginx's per-read limit (nginx has no whole-body deadline); a body nginx does not read
    (the baseline answers `/` without one) is discarded for at most lingering_time.
    """
    head = nginx_time(head_timeout_s)
    body = nginx_time(body_timeout_s)
    return (
        f"client_header_timeout {head};\n"
        f"        keepalive_timeout {head};\n"
        f"        client_body_timeout {body};\n"
        f"        lingering_time {body};"
    )


def baseline_server_block(
    host: str,
    port: int,
    files_dir: str | None,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
    body_timeout_s: float = contract.BODY_TIMEOUT_S,
    protocol: str = contract.PROTOCOL_H1,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    workloads_dir: Path | None = None,
) -> str:
    """The contract's `/`, the workloads nginx serves (`workload_locations`, the 10 KB
    ones from `workloads_dir`) and, with `files_dir`, `/files/{name}`; everything else 404.

    `protocol` is the listener's (LISTEN_PARAMETERS); a TLS one needs `tls_cert` and `tls_key`.
    Since nginx 1.19.7 HTTP/2 connections keep the same client_header_timeout and
    keepalive_timeout as HTTP/1.1 ones, so the slow-client directives serve every protocol.
    """
    if any(c in contract.TEXT_BODY.decode() for c in '$"\\'):
        raise ValueError("the text body cannot be written as an nginx string")
    tls = ""
    if protocol in contract.TLS_PROTOCOLS:
        if tls_cert is None or tls_key is None:
            raise ValueError(f"protocol {protocol} needs a certificate and its key")
        tls = "\n        " + tls_directives(tls_cert, tls_key)
    files = ""
    if files_dir is not None:
        # Only names matching the contract's pattern reach the file system (one segment,
        # no leading dot), after nginx decoded and normalised the URI; a symlink leaving
        # the directory is refused by disable_symlinks (403), answered 404 like a miss.
        root = quote(str(Path(files_dir).resolve()) + "/")[1:-1]
        files = f"""
        location ~ "^{contract.ROUTE_FILES_PREFIX}({contract.FILE_NAME_PATTERN})$" {{
            alias "{root}$1";
            disable_symlinks on;
            error_page 403 = @not_found;
        }}"""
    # nginx refuses a target that climbs above the root (/files/..%2f..%2fx) or holds a
    # NUL with 400 while parsing the request line; under /files/ that is a file that is
    # not there (404, as every server answers), elsewhere a bad request stays a 400.
    return f"""
    server {{
        {listen_directive(host, port, protocol)}{tls}
        {client_timeout_directives(head_timeout_s, body_timeout_s)}
        error_page 400 = {BAD_REQUEST_PATH};
        location = {contract.ROUTE_TEXT} {{
            default_type {contract.TEXT_CONTENT_TYPE};
            return 200 "{contract.TEXT_BODY.decode()}";
        }}{workload_locations(workloads_dir)}{files}
        location / {{
            return 404;
        }}
        location @not_found {{
            return 404;
        }}
        location = {BAD_REQUEST_PATH} {{
            internal;
            if ($request ~ "^[A-Z]+ {contract.ROUTE_FILES_PREFIX}") {{  # the raw request line
                return 404;
            }}
            return 400;
        }}
    }}
"""


def status_server_block(port: int) -> str:
    """A loopback-only server with stub_status, which the telemetry reads."""
    return f"""
    server {{
        listen 127.0.0.1:{port};
        location = {STATUS_PATH} {{
            stub_status;
        }}
        location / {{
            return 404;
        }}
    }}
"""


def proxy_blocks(
    listen_host: str,
    listen_port: int,
    upstream_ports: Sequence[int],
    keepalive: int = UPSTREAM_KEEPALIVE,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
    body_timeout_s: float = contract.BODY_TIMEOUT_S,
) -> str:
    """A round-robin reverse proxy to the instances on 127.0.0.1, with kept-alive upstreams.

    HTTP/1.1 with an empty Connection header keeps upstream connections open across
    requests; a WebSocket upgrade is passed through (Connection: upgrade) when asked for.
    Clients get the head deadline an instance would apply (client_timeout_directives); nginx
    reads a whole body before it proxies the request (under its per-read limit), so an
    instance never waits for a slow client's body.
    """
    if not upstream_ports:
        raise ValueError("a load balancer needs at least one upstream port")
    servers = "".join(f"\n        server 127.0.0.1:{port};" for port in upstream_ports)
    return f"""
    map $http_upgrade $lb_connection {{
        default upgrade;
        '' '';
    }}
    upstream instances {{{servers}
        keepalive {keepalive};
        keepalive_requests 100000;
        keepalive_timeout {nginx_time(UPSTREAM_KEEPALIVE_TIMEOUT_S)};
    }}
    server {{
        {listen_directive(listen_host, listen_port)}
        {client_timeout_directives(head_timeout_s, body_timeout_s)}
        location / {{
            proxy_pass http://instances;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $lb_connection;  # "" unless upgrading
            proxy_read_timeout 3600s;  # idle WebSocket agents
        }}
    }}
"""


# -- processes ---------------------------------------------------------------------------
def nginx_binary() -> str:
    """The nginx executable (it lives in /usr/sbin, often not on a user's PATH)."""
    path = shutil.which("nginx", path=PROGRAM_PATH)
    if path is None:
        raise NginxError("nginx is not installed (harness doctor --install)")
    return path


@dataclass(frozen=True)
class Site:
    """What one start attempt renders: the blocks inside `http {}`, where to probe, and
    every port the blocks listen on (default: the probe's)."""

    blocks: str
    probe_host: str
    probe_port: int
    probe_path: str = "/"
    ports: tuple[int, ...] = ()

    @property
    def listen_ports(self) -> set[int]:
        return set(self.ports or (self.probe_port,))


class Nginx:
    """One nginx master and its workers, from a config in a private temporary directory.

    `cpus` runs it under `taskset -c`; `new_session` puts it in its own process group
    (killed as a group as the last resort) instead of its parent's.
    """

    def __init__(
        self,
        blocks: str,
        *,
        workers: int = 1,
        cpus: str | None = None,
        new_session: bool = False,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        prefix: list[str] = []
        if cpus is not None:
            taskset = shutil.which("taskset", path=PROGRAM_PATH)
            if taskset is None:
                raise NginxError("taskset is not installed (package util-linux)")
            prefix = [taskset, "-c", cpus]
        binary = nginx_binary()
        self.new_session = new_session
        self.run_dir = scratch.mkdtemp("nginx")
        try:
            config = self.run_dir / "nginx.conf"
            config.write_text(render_config(self.run_dir, blocks, workers))
            command = [
                *prefix,
                binary,
                "-p", f"{self.run_dir}/",
                "-c", str(config),
                "-e", str(self.run_dir / "error.log"),  # the log before the config is read
            ]  # fmt: skip
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # nginx writes to error.log; error_tail() shows it
                start_new_session=new_session,
                preexec_fn=preexec_fn,  # the harness's parent-death signal, when it asks
            )
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise

    @property
    def pid(self) -> int:
        """The master's pid (taskset execs nginx, so it is the same process)."""
        return self.process.pid

    def processes(self) -> list[psutil.Process]:
        """The master and its workers (workers sorted by pid); empty once it is gone."""
        try:
            master = psutil.Process(self.process.pid)
            workers = sorted(master.children(), key=lambda p: p.pid)
        except psutil.Error:
            return []
        return [master, *workers]

    def error_tail(self, limit_chars: int = 400) -> str:
        try:
            text = (self.run_dir / "error.log").read_text(errors="replace").strip()
        except OSError:
            return "(no error log)"
        return text[-limit_chars:] if text else "(empty error log)"

    def wait_answering(self, site: Site, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until nginx itself holds a listening socket on every port of `site`, no
        other process listens on one of them, and the probe gets an HTTP answer (nginx
        counts that one request): an answer from another process's listener on a port
        picked free is never taken for nginx's.

        Raises NginxError (with the error log's tail) if nginx exits, stays silent, or
        shares a port with another process (PORT_TAKEN: start_nginx picks new ports).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NginxError(
                    f"nginx exited with status {self.process.returncode}: {self.error_tail()}"
                )
            pids = listeners.tree_pids(self.process.pid)
            if site.listen_ports <= listeners.listening_ports(pids):
                others = listeners.other_listeners(site.listen_ports, pids, root=self.process.pid)
                if others:
                    taken = ", ".join(f"{port} (pid {pid})" for port, pid in others.items())
                    raise NginxError(f"{PORT_TAKEN}: another process listens on {taken}")
                if http_answers(site.probe_host, site.probe_port, site.probe_path):
                    return
            time.sleep(0.05)
        raise NginxError(f"nginx did not answer within {timeout_s:.0f} s: {self.error_tail()}")

    def stop(self, grace_s: float = contract.SHUTDOWN_GRACE_S) -> int | None:
        """QUIT (graceful: finish requests in flight), then TERM, then KILL; remove the dir.

        The whole sequence takes at most `grace_s`; returns nginx's exit status.
        """
        processes = self.processes()
        steps = ((signal.SIGQUIT, 0.8 * grace_s), (signal.SIGTERM, 0.15 * grace_s))
        for signum, wait_s in steps:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait_s)
        if self.process.poll() is None:
            self._kill(processes)
            self.process.wait()
        self._kill([p for p in processes[1:] if p.is_running()])  # workers outliving it
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return self.process.returncode

    def _kill(self, processes: list[psutil.Process]) -> None:
        if self.new_session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()


def start_nginx(
    render: Callable[[], Site],
    *,
    workers: int = 1,
    cpus: str | None = None,
    new_session: bool = False,
    attempts: int = PORT_ATTEMPTS,
    ready_timeout_s: float = READY_TIMEOUT_S,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[Nginx, Site]:
    """Render, start, and wait until nginx answers; a lost port race renders again.

    `render` picks its ports each time it is called (free_port), so another attempt gets
    fresh ones.
    """
    for attempt in range(attempts):
        site = render()
        nginx = Nginx(
            site.blocks, workers=workers, cpus=cpus, new_session=new_session, preexec_fn=preexec_fn
        )
        try:
            nginx.wait_answering(site, ready_timeout_s)
            return nginx, site
        except NginxError as error:
            log = nginx.error_tail()
            nginx.stop(grace_s=1.0)
            if PORT_TAKEN not in f"{error} {log}" or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


# -- the baseline server -----------------------------------------------------------------
_STUB_STATUS = re.compile(rb"Active connections:\s*(\d+).*?\n\s*(\d+)\s+(\d+)\s+(\d+)", re.DOTALL)


class StubStatus:
    """Reads nginx's stub_status over one kept-alive connection, minus its own footprint."""

    def __init__(self, port: int, own_requests: int) -> None:
        self.port = port
        self.own_requests = own_requests  # probes already sent (nginx counts them too)
        self.max_open = 0
        self._connection: http.client.HTTPConnection | None = None

    def read(self) -> tuple[int, int] | None:
        """(open connections, requests served) without this reader's; None if unreadable."""
        for _ in range(2):  # one reconnect if nginx closed the kept-alive connection
            if self._connection is None:
                self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            try:
                self._connection.request("GET", STATUS_PATH)
                body = self._connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                self._connection.close()
                self._connection = None
                continue
            self.own_requests += 1
            match = _STUB_STATUS.search(body)
            if match is None:
                return None
            active, _accepts, _handled, requests = (int(g) for g in match.groups())
            # The status connection is one of the active ones and each read is a request.
            open_now = max(0, active - 1)
            self.max_open = max(self.max_open, open_now)
            return open_now, max(0, requests - self.own_requests)
        return None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()


def _rss_bytes(process: psutil.Process) -> int:
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def telemetry_lines(
    nginx: Nginx,
    counts: tuple[int, int],
    max_open: int,
    port: int,
    worker_pids: Sequence[int],
) -> list[dict[str, Any]]:
    """One line per nginx worker (see the module docstring for how counts are carried)."""
    open_now, requests = counts
    processes = {p.pid: p for p in nginx.processes()}
    master_rss = _rss_bytes(processes[nginx.pid]) if nginx.pid in processes else 0
    lines = []
    for worker, worker_pid in enumerate(worker_pids):
        worker_process = processes.get(worker_pid)
        rss = _rss_bytes(worker_process) if worker_process is not None else 0
        first = worker == 0
        line: dict[str, Any] = {
            "t": round(time.time(), 3),
            "pid": os.getpid() if first else worker_pid,
            "open": open_now if first else 0,
            "max_open": max_open if first else 0,
            "requests": requests if first else 0,
            "messages": 0,
            "bad": 0,
            "tick_avg_ms": 0.0,  # nginx has no event-loop probe
            "tick_max_ms": 0.0,
            "gc_collections": 0,
            "gc_pause_ms": 0.0,
            "stored": 0,
            "sink_errors": 0,
            "backlog": 0,
            "rss_bytes": rss + (master_rss if first else 0),
            "framework": "nginx",
            "loop": "epoll",
            "port": port,
            "worker": worker,
            "mc_port": 0,
            "backend_errors": 0,
        }
        lines.append({field: line[field] for field in contract.TELEMETRY_FIELDS})
    return lines


def _worker_pids(nginx: Nginx, workers: int, timeout_s: float = 2.0) -> list[int]:
    """The pids of nginx's `workers` worker processes (the master forks them at start)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [p.pid for p in nginx.processes()[1:]]
        if len(found) >= workers or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    # A worker not seen (yet) still gets a line, keyed by the master's pid and its index.
    return (found + [-(nginx.pid * 100 + i) for i in range(workers)])[:workers]


def _emit(lines: list[dict[str, Any]]) -> None:
    sys.stdout.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    sys.stdout.flush()


def main(options: ServerOptions) -> int:
    """Run nginx as the baseline server until SIGTERM/SIGINT; 0 on a clean stop."""
    if options.sink != "empty":
        print("nginx serves only the empty sink", file=sys.stderr)
        return 2
    if options.files_dir is not None and not Path(options.files_dir).is_dir():
        print(f"nginx: --files-dir {options.files_dir} is not a directory", file=sys.stderr)
        return 2
    stopping = threading.Event()

    def request_stop(_signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    ports: dict[str, int] = {}
    workloads_dir = scratch.mkdtemp("nginx-workloads")
    write_workload_files(workloads_dir)

    def render() -> Site:
        ports["main"] = options.port or free_port(options.host)
        ports["status"] = free_port("127.0.0.1")
        blocks = baseline_server_block(
            options.host,
            ports["main"],
            options.files_dir,
            options.head_timeout_s,
            options.body_timeout_s,
            options.protocol,
            options.tls_cert,
            options.tls_key,
            workloads_dir,
        ) + status_server_block(ports["status"])
        return Site(
            blocks, "127.0.0.1", ports["status"], STATUS_PATH, (ports["main"], ports["status"])
        )

    try:
        nginx, _site = start_nginx(render, workers=options.workers)
    except (NginxError, ValueError) as error:
        print(f"nginx: {error}", file=sys.stderr)
        shutil.rmtree(workloads_dir, ignore_errors=True)
        return 1
    status = StubStatus(ports["status"], own_requests=1)  # the readiness probe
    worker_pids = _worker_pids(nginx, options.workers)
    code = 0
    try:
        while not stopping.is_set():
            if nginx.process.poll() is not None:
                if stopping.wait(0.2):  # Ctrl-C reached nginx first: a stop, not a crash
                    break
                print(
                    f"nginx exited with status {nginx.process.returncode}: {nginx.error_tail()}",
                    file=sys.stderr,
                )
                code = 1
                break
            counts = status.read()
            if counts is not None:
                _emit(telemetry_lines(nginx, counts, status.max_open, ports["main"], worker_pids))
            stopping.wait(contract.TELEMETRY_INTERVAL_S)
    finally:
        status.close()
        nginx.stop()
        shutil.rmtree(workloads_dir, ignore_errors=True)
    return code

"""`python -m servers nginx ...`: nginx run as the baseline server, its config rendered
for the options given (the contract's `/`, the workloads nginx serves, `/files`), with a
loopback-only stub_status block the telemetry reads, until SIGTERM/SIGINT."""

from __future__ import annotations

import shutil
import signal
import sys
import threading
from pathlib import Path

from servers import contract, scratch
from servers.baselines.nginx.config import STATUS_PATH, baseline_server_block, status_server_block
from servers.baselines.nginx.process import Nginx, NginxError, Site, start_nginx
from servers.baselines.nginx.telemetry import StubStatus, emit_lines, telemetry_lines, worker_pids
from servers.baselines.nginx.workloads import write_workload_files
from servers.contract import ServerOptions
from servers.listeners import free_port  # nginx cannot listen on port 0


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
    try:
        nginx, _site = start_nginx(
            lambda: _baseline_site(options, workloads_dir, ports), workers=options.workers
        )
    except (NginxError, ValueError) as error:
        print(f"nginx: {error}", file=sys.stderr)
        shutil.rmtree(workloads_dir, ignore_errors=True)
        return 1
    try:
        return _report_until_stopped(nginx, options.workers, ports, stopping)
    finally:
        nginx.stop()
        shutil.rmtree(workloads_dir, ignore_errors=True)


def _baseline_site(options: ServerOptions, workloads_dir: Path, ports: dict[str, int]) -> Site:
    """One start attempt's config: the public server on `--port` (or a port picked free)
    and the status server on a loopback port picked free, both kept in `ports`."""
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
    return Site(blocks, "127.0.0.1", ports["status"], STATUS_PATH, (ports["main"], ports["status"]))


def _report_until_stopped(
    nginx: Nginx, workers: int, ports: dict[str, int], stopping: threading.Event
) -> int:
    """Write the telemetry lines once a second until a stop is asked (0) or nginx exits
    on its own (1, its error log's tail on stderr)."""
    status = StubStatus(ports["status"], own_requests=1)  # the readiness probe
    pids = worker_pids(nginx, workers)
    try:
        while not stopping.is_set():
            if nginx.process.poll() is not None:
                if stopping.wait(0.2):  # Ctrl-C reached nginx first: a stop, not a crash
                    return 0
                print(
                    f"nginx exited with status {nginx.process.returncode}: {nginx.error_tail()}",
                    file=sys.stderr,
                )
                return 1
            counts = status.read()
            if counts is not None:
                emit_lines(telemetry_lines(nginx, counts, status.max_open, ports["main"], pids))
            stopping.wait(contract.TELEMETRY_INTERVAL_S)
        return 0
    finally:
        status.close()

"""`harness bench`: our server against the framework's minimal hello-world, same core, same run.

Both run pinned to the server CPUs; wrk runs on the load CPUs. Rounds alternate the two
apps so that drift on a noisy machine hits both alike; medians are reported.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from drivers.wrk import run_wrk
from harness.errors import UserError
from harness.server_process import start_server
from servers import contract


@dataclass(frozen=True)
class BenchResult:
    framework: str
    loop: str | None
    ours_requests_per_s: float
    minimal_requests_per_s: float
    rounds: int

    @property
    def ratio(self) -> float:
        return self.ours_requests_per_s / self.minimal_requests_per_s


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UserError(f"the minimal app exited with status {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise UserError(f"the minimal app did not listen on {port} within {timeout_s:.0f} s")


def bench_framework(
    framework: str, *, loop: str | None = None, server_cpus: str = "0", load_cpus: str = "1",
    connections: int = 100, duration_s: float = 10.0, rounds: int = 3,
) -> BenchResult:  # fmt: skip
    """Alternate wrk runs against our server and the minimal app; medians of req/s."""
    port = free_port()
    minimal = subprocess.Popen(
        ["taskset", "-c", server_cpus, sys.executable, "-m", "servers.minimal", framework,
         "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        _wait_listening(port, minimal)
        with start_server(framework, loop=loop, cpus=server_cpus) as ours:
            targets = {"ours": ours.url + contract.ROUTE_TEXT,
                       "minimal": f"http://127.0.0.1:{port}{contract.ROUTE_TEXT}"}  # fmt: skip
            for url in targets.values():  # warm-up
                run_wrk(url, connections=connections, duration_s=2, cpus=load_cpus)
            measured: dict[str, list[float]] = {"ours": [], "minimal": []}
            for _ in range(rounds):
                for name, url in targets.items():
                    report, _ = run_wrk(
                        url, connections=connections, duration_s=duration_s, cpus=load_cpus
                    )
                    if report.errors_total:
                        raise UserError(f"{framework} {name}: wrk saw errors {report.errors}")
                    measured[name].append(report.requests_per_s)
    finally:
        minimal.terminate()
        try:
            minimal.wait(5)
        except subprocess.TimeoutExpired:
            minimal.kill()
    return BenchResult(
        framework, loop, statistics.median(measured["ours"]),
        statistics.median(measured["minimal"]), rounds,
    )  # fmt: skip

"""`harness bench`: our server against the framework's minimal hello-world, same core, same run.

Both run pinned to the server CPUs; wrk runs on the load CPUs. Rounds alternate the two
apps so that drift on a noisy machine hits both alike; medians are reported. A plugin's or
a command's server is measured against its own `minimal_command`.

On a protocol other than h1 both apps speak it: our server, and a minimal command whose
placeholders carry it (harness.frameworks.command_protocols); the builtin minimal apps
(servers/minimal) speak h1 only, so `bench_unsupported` says why a bench cannot run.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from drivers.base import Target, run_step
from drivers.processes import kill_group, spawn
from drivers.wrk import WrkDriver
from harness.frameworks import command_protocols
from harness.server_process import protocol_unsupported, start_command_server, start_server
from harness.services import wait_listening
from harness.tls import Certificates
from model.errors import UserError
from model.ramps import RampStep
from model.scenarios import SCENARIOS
from servers import FRAMEWORKS
from servers.contract import PROTOCOL_H1


@dataclass(frozen=True)
class BenchResult:
    framework: str
    loop: str | None
    ours_requests_per_s: float
    minimal_requests_per_s: float
    rounds: int
    protocol: str = PROTOCOL_H1

    @property
    def ratio(self) -> float:
        return self.ours_requests_per_s / self.minimal_requests_per_s


def bench_unsupported(framework: str, protocol: str) -> str | None:
    """Why `framework` cannot be benched on `protocol` (its server or its minimal app does
    not speak it), or None."""
    info = FRAMEWORKS[framework]
    why = protocol_unsupported(info, protocol)
    if why is not None or protocol == PROTOCOL_H1:
        return why
    if not info.minimal_command:
        return f"{framework}'s minimal app (servers/minimal) speaks h1 only"
    spoken, notes = command_protocols(f"{framework}'s minimal", info.minimal_command)
    return None if protocol in spoken else notes[protocol]


@contextlib.contextmanager
def minimal_app(
    framework: str,
    server_cpus: str,
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
) -> Iterator[int]:
    """The framework's minimal app, pinned to `server_cpus`, running; yields its port.

    A builtin framework's is servers/minimal (port 0, read back from the app's own
    listening socket); a plugin's or a command's is its `minimal_command`, started as a
    command server (a free port the harness picked, checked to be the app's own), on
    `protocol`.
    """
    info = FRAMEWORKS[framework]
    if info.minimal_command:
        with start_command_server(
            info, info.minimal_command, cpus=server_cpus, protocol=protocol,
            certificates=certificates,
        ) as app:  # fmt: skip
            yield app.port
        return
    if protocol != PROTOCOL_H1:
        raise UserError(
            f"bench {framework} on {protocol}: {bench_unsupported(framework, protocol)}"
        )
    minimal = spawn(
        [
            "taskset",
            "-c",
            server_cpus,
            sys.executable,
            "-m",
            "servers.minimal",
            framework,
            "--port",
            "0",  # the OS chooses; read back from the app's own listening socket
        ],
        death_signal=signal.SIGTERM,
    )
    try:
        yield wait_listening(minimal, f"the minimal {framework} app")
    finally:
        minimal.terminate()
        try:
            minimal.wait(5)
        except subprocess.TimeoutExpired:
            pass
        finally:  # whatever interrupts the wait, the app and what it forked end here
            kill_group(minimal)
            minimal.wait()


def bench_framework(
    framework: str,
    *,
    loop: str | None = None,
    server_cpus: str = "0",
    load_cpus: str = "1",
    connections: int = 100,
    duration_s: float = 10.0,
    rounds: int = 3,
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
) -> BenchResult:
    """Alternate wrk runs against our server and the minimal app, both on `protocol`
    (TLS: serving `certificates`); medians of req/s."""
    with (
        minimal_app(framework, server_cpus, protocol, certificates) as port,
        start_server(
            framework, loop=loop, cpus=server_cpus, protocol=protocol, certificates=certificates
        ) as ours,
        tempfile.TemporaryDirectory(prefix="harness-bench-") as raw_dir,
    ):
        text = SCENARIOS["text"]
        ca_path = certificates.ca_path if certificates is not None else None
        targets = {
            name: Target("127.0.0.1", target_port, text, protocol=protocol, ca_path=ca_path)
            for name, target_port in (("ours", ours.port), ("minimal", port))
        }
        driver = WrkDriver(threads=1)
        warm_up = RampStep(0, connections, "concurrency", duration_s=2)
        step = RampStep(0, connections, "concurrency", duration_s=duration_s)
        for name, target in targets.items():
            run_step(driver, warm_up, target, load_cpus, Path(raw_dir), f"warm-{name}")
        measured: dict[str, list[float]] = {"ours": [], "minimal": []}
        for round_index in range(rounds):
            for name, target in targets.items():
                label = f"{name}-{round_index}"
                result = run_step(driver, step, target, load_cpus, Path(raw_dir), label)
                if result.errors_total:
                    raise UserError(f"{framework} {name}: wrk saw errors {result.errors}")
                measured[name].append(result.rate)
    return BenchResult(
        framework,
        loop,
        statistics.median(measured["ours"]),
        statistics.median(measured["minimal"]),
        rounds,
        protocol,
    )

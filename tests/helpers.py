"""What several test modules share: skips for what is not installed, the CLI, raw sockets.

The raw WebSocket frame builder (`ws_frame`, `raw_ws_connect`, `raw_ws_close_code`) lives
in harness/verify/websocket.py, whose checks use it too; it is re-exported here for the tests.

Test modules import from here (and get fixtures from conftest.py), never from each other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.run.analysis import with_rounds
from harness.server_process import ServerProcess
from harness.services.ferretdb import ferretdb_binary
from harness.tools import tool_path
from harness.verify import raw_ws_close_code, raw_ws_connect, ws_frame
from model.results import Case, Run, Step, Summary
from servers import FRAMEWORKS, contract

# Output captured from the real tools, read by the parser tests.
DATA_DIR = Path(__file__).parent / "data"


# The smoke profile's two steps, shortened for tests that need a measured step, not a
# long one: 1 s steps, no warm-up, no cool-down, through `--set` (users' smoke unchanged)
SHORT_SMOKE = ("--set", "ramp.duration_s=1", "--set", "warmup_s=0", "--set", "cooldown_s=0")
# ...and one step (concurrency 10) where the test needs no second one
ONE_STEP_SMOKE = (*SHORT_SMOKE, "--set", "ramp.stop=10")


def require_framework(name: str) -> None:
    """Skip a framework that is not installed, except in CI where every one must be."""
    missing = FRAMEWORKS[name].missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed in CI: missing {', '.join(missing)}")
        pytest.skip(f"{name} not installed: missing {', '.join(missing)}")


def require_tool(name: str, how: str = "harness doctor --install") -> None:
    """Skip without a system tool, except in CI where `.ci/run` installs every one."""
    found = ferretdb_binary().is_file() if name == "ferretdb" else tool_path(name) is not None
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed in CI: {how}")
        pytest.skip(f"{name} not installed: {how}")


def require_tools(*names: str) -> None:
    """Skip without any of `names` (one skip naming every missing tool)."""
    missing = [name for name in names if tool_path(name) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"missing in CI: {missing}")
        pytest.skip(f"missing tools {missing}: harness doctor --install")


def require_ferretdb() -> None:
    require_tool("ferretdb")


def harness(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the `harness` console script as a user would."""
    executable = shutil.which("harness")
    assert executable, "the harness console script is not installed"
    return subprocess.run(
        [executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_exchange(port: int, request: bytes, timeout_s: float = 5.0) -> bytes:
    """Send raw bytes, read what comes back until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(request)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def status_code(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def assert_still_serving(server: ServerProcess) -> None:
    response = httpx.get(server.url + contract.ROUTE_TEXT, timeout=5)
    assert response.status_code == 200
    assert response.content == contract.TEXT_BODY


def stop_in_time(server: ServerProcess) -> None:
    """SIGTERM with a connection open: exit 0 within the contract's grace."""
    with httpx.Client(base_url=server.url, timeout=5) as client:
        assert client.get(contract.ROUTE_TEXT).status_code == 200
        started = time.monotonic()
        status = server.stop()
    assert status == 0, server.stderr_tail()
    assert time.monotonic() - started < contract.SHUTDOWN_GRACE_S


# Servers whose code under test is another's: eventlet runs the green runtime gevent runs
# (servers/runtimes/green: sinks, backends, WebSocket session), node-express the Node
# modules node-http runs (sinks, backends, websocket.js). Tests of that shared code run the
# second of each pair only in the `slow` run, which keeps the default run under 30 minutes
# on the CI machine; tests of what differs (HTTP parsing, deadlines, signals) run both.
SHARED_RUNTIME = {"eventlet": "gevent", "node-express": "node-http"}


def one_per_runtime(names: Sequence[str]) -> list[Any]:
    """`names` as test parameters, those whose shared code another of them covers marked
    `slow` (SHARED_RUNTIME)."""
    return [
        pytest.param(name, marks=pytest.mark.slow) if SHARED_RUNTIME.get(name) in names else name
        for name in names
    ]


def servers_serving(*routes: str) -> list[str]:
    """Every registered server (baselines included) that serves all of `routes`."""
    return [name for name, f in FRAMEWORKS.items() if all(f.serves(r) for r in routes)]


def mc_port(server: ServerProcess) -> int:
    """Where the server's memcached socket service listens (its first telemetry line)."""
    return int(server.telemetry_lines()[0].get("mc_port") or 0)


# -- synthetic results (diff, history, trend, thresholds), built with model.results -------
SYNTHETIC_HOST = {"hostname": "vm", "cpu_model": "Test CPU", "cores": 2, "kernel": "6.1"}


def synthetic_latency_ms(p99_ms: float | None) -> dict[str, float | None]:
    """A step's latency record as a driver writes it, with its p99 given (ms)."""
    return {
        "avg": 1.0,
        "p50": 1.0,
        "p90": 2.0,
        "p99": p99_ms,
        "p99.9": None,
        "p99.99": None,
        "max": 9.0,
    }


def synthetic_step(achieved: float, *, p99_ms: float = 5.0, errors: int = 0) -> Step:
    """A concurrency step at 100 connections that achieved `achieved` req/s."""
    return Step(
        offered=100,
        unit="concurrency",
        achieved=achieved,
        replies=int(achieved),
        errors={"total": errors},
        error_rate=errors / (achieved + errors) if achieved + errors else 0.0,
        latency_ms=synthetic_latency_ms(p99_ms),
        server_cpu_pct=95.0,
    )


def synthetic_case(
    framework: str,
    rounds: list[float],
    *,
    p99_ms: list[float] | None = None,
    status: str = "ok",
    process_model: str = "single",
    reconcile: dict[str, int] | None = None,
    round_errors: int = 0,
    precision_pct: float | None = None,
) -> Case:
    """A case whose ramp peaked at the first round's value, then measured in `rounds`
    (none: the ramp's peak alone, no interval) — made by the runner's own with_rounds,
    to `precision_pct` when given."""
    peak = rounds[0] if rounds else 1000.0
    ramp_case = Case(
        framework=framework,
        scenario="text",
        sink="empty",
        driver="wrk",
        process_model=process_model,
        affinity={"mode": "both", "server": "0", "agent": "1"},
        status=status,  # type: ignore[arg-type]
        error=None if status == "ok" else f"{framework} would not start",
        steps=(synthetic_step(peak),) if status == "ok" else (),
        summary=Summary(peak=peak, peak_offered=100, p99_at_peak_ms=5.0)
        if status == "ok"
        else Summary(),
        reconcile=reconcile,
    )
    p99s = p99_ms or [5.0] * len(rounds)
    measured = [
        (
            index,
            Case(
                **{
                    **ramp_case.__dict__,
                    "steps": (synthetic_step(value, p99_ms=p99, errors=round_errors),),
                }
            ),
        )  # type: ignore[arg-type]
        for index, (value, p99) in enumerate(zip(rounds, p99s, strict=True))
    ]
    return with_rounds(ramp_case, measured, precision_pct)


def synthetic_run(
    run_id: str,
    cases: list[Case],
    *,
    profile: str = "quick",
    host: dict[str, object] | None = None,
    started: str = "2026-12-01T10:00:00+00:00",
) -> Run:
    return Run(
        run_id=run_id,
        started=started,
        finished=started,
        host=dict(host or SYNTHETIC_HOST),
        versions={},
        config={"profile": {"name": profile}},
        cases=tuple(cases),
    )


__all__ = ["raw_ws_close_code", "raw_ws_connect", "ws_frame"]  # re-exported from verify


# -- servers the user brings (tests/*/test_byo_servers.py) ----------------------------------
@contextlib.contextmanager
def fresh_registry() -> Iterator[None]:
    """Whatever is registered inside (plugins, commands) is gone after: the registry, the
    plugin problems and the plugins loaded are put back as they were."""
    from servers import plugins

    frameworks = dict(FRAMEWORKS)
    problems = list(plugins.PLUGIN_PROBLEMS)
    loaded = set(plugins._loaded)
    try:
        yield
    finally:
        FRAMEWORKS.clear()
        FRAMEWORKS.update(frameworks)
        plugins.PLUGIN_PROBLEMS[:] = problems
        plugins._loaded.clear()
        plugins._loaded.update(loaded)


def write_plugin(directory: Path, module: str, source: str, attribute: str = "frameworks") -> Path:
    """A plugin distribution installed into `directory` (put it on sys.path or PYTHONPATH):
    the module `module` with `source`, and a .dist-info naming `module:attribute` in the
    serverbench.frameworks entry point group, as pip would install it."""
    (directory / f"{module}.py").write_text(source)
    dist_info = directory / f"{module}-1.0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    name = module.replace("_", "-")
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(
        f"[serverbench.frameworks]\n{module} = {module}:{attribute}\n"
    )
    (dist_info / "RECORD").write_text("")
    return dist_info


CONTENDERS_ENTRY_POINT = "servers.contenders:frameworks"


def contenders_path(directory: Path) -> str | None:
    """A directory to put on PYTHONPATH so that the contenders' entry point is seen, or
    None when the installed harness declares it already. An editable install made before
    the entry point existed (a developer's virtualenv) has stale metadata: this writes
    what `pip install -e .` would, in `directory`."""
    import importlib.metadata

    declared = importlib.metadata.entry_points(group="serverbench.frameworks")
    if any(entry.value == CONTENDERS_ENTRY_POINT for entry in declared):
        return None
    dist_info = directory / "serverbench_contenders_dev-0.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: serverbench-contenders-dev\nVersion: 0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[serverbench.frameworks]\ncontenders = {CONTENDERS_ENTRY_POINT}\n"
    )
    return str(directory)


def one_step_case(framework: str, only: Step, summary: Summary) -> Case:
    """An ok text case on wrk (single, both) whose ramp is the one step `only`."""
    return Case(
        framework=framework,
        scenario="text",
        sink="empty",
        driver="wrk",
        process_model="single",
        affinity={"mode": "both"},
        status="ok",
        steps=(only,),
        summary=summary,
    )

"""`harness bench --ws`: idle WebSocket connections on our server against the runtime's
minimal WebSocket server (servers/minimal), memory and CPU per connection.

The yardstick is the smallest correct WebSocket server of the same runtime
(`python -m servers.minimal NAME --ws`), as the HTTP bench's is the minimal hello-world.

A round runs each app once, the order alternating round by round (ours first, then the
minimal server first). Each run starts the app afresh — a process that held and dropped
connections keeps some of their memory, so the next round would measure reuse — in a
cgroup of its own pinned to the server CPUs (harness.cgroups), and holds idle connections
with the agent (drivers.agent, the `ws-idle` scenario) through the connection ramp of
harness.connections: WS_BENCH_STEPS steps up to `connections`, each held `hold_s`, opened
at `open_rate_per_s`. At each hold the app's memory is read once, a third of the way in
(after the step's handshakes, before the next step opens or the agents close):

- KB per connection: the slope of the cgroup's memory (sockets' buffers included, as
  harness.cgroups counts them) over the held steps; the process tree's RSS slope beside
  it as a cross-check (and the figure itself where no cgroup can be made);
- CPU µs per opened connection: the app's CPU (its cgroup's cpuacct; without one, its
  process tree's clocks) from the first connection to the top step's hold, over the
  connections opened. It includes the short holds of the lower steps, where idle
  connections cost a server nothing but its timers (ours: the telemetry line and the
  10 ms tick probe) — so the app's idle CPU over as long, its rate read for IDLE_S before
  the first connection, is taken off.

Past one process's open files (20,000 here) both apps run as workers on one port
(`ws_workers`: ours `--workers N`, the minimal server `--workers N`, servers.workers;
Node's through its cluster module), the same count for both, in the one cgroup; the
agents run here from 127.0.0.x addresses, or on a fleet's load hosts (`--fleet`,
harness.fleet: the apps then listen on the address the hosts reach).

The ratio ours / minimal is taken per round and its 95 % interval is the t interval on
the log ratios (harness.stats.paired_ratio_interval); the verdict compares that interval
with RATIO_LIMIT.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from drivers.agent.plan import FD_HEADROOM
from harness.bench_live import BenchWatch, app_run, ws_round_finished
from harness.bench_ws_figures import (
    APPS,
    RATIO_LIMIT,
    HeldStep,
    WsAppRun,
    WsBenchResult,
    WsRatio,
    cpu_us_per_connection,
    failed_reasons_of,
    slope_kb_per_connection,
    verdict,
    ws_bench_summary,
    ws_ratio,
)
from harness.cgroups.groups import Cgroup, run_support
from harness.connection_plan import REUSEPORT_SPREAD
from harness.connections import (
    AgentGroup,
    ConnectionRampResult,
    LocalAgents,
    run_connection_ramp,
)
from harness.measured import measured_value
from harness.monitor import Monitor
from harness.server_process import ServerProcess, start_command_server, start_server
from harness.topology import ProcessModel, Topology, parse_process_model
from model.errors import UserError
from model.ramps import ConnectionRamp
from model.results import Step
from model.scenarios import SCENARIOS
from servers import FRAMEWORKS, listeners, scratch
from servers.minimal import WEBSOCKET_MINIMALS

if TYPE_CHECKING:
    from harness.fleet.client import Fleet

# the figures (pure) are in harness.bench_ws_figures, importable from here too
__all__ = [
    "APPS",
    "IDLE_S",
    "RATIO_LIMIT",
    "READ_AT_HOLD_SHARE",
    "WS_BENCH_CONNECTIONS",
    "WS_BENCH_HOLD_S",
    "WS_BENCH_OPEN_RATE_MAX",
    "WS_BENCH_OPEN_RATE_MAX_WORKERS",
    "WS_BENCH_OPEN_S",
    "WS_BENCH_ROUNDS",
    "WS_BENCH_STEPS",
    "HeldStep",
    "WsAppRun",
    "WsBenchResult",
    "WsRatio",
    "bench_ws_framework",
    "cpu_us_per_connection",
    "failed_reasons_of",
    "minimal_ws_command",
    "slope_kb_per_connection",
    "verdict",
    "ws_app_run",
    "ws_bench_summary",
    "ws_bench_unsupported",
    "ws_ramp",
    "ws_ratio",
    "ws_workers",
]

WS_BENCH_CONNECTIONS = 15_000
WS_BENCH_ROUNDS = 3
WS_BENCH_STEPS = 5
WS_BENCH_HOLD_S = 3.0
WS_BENCH_OPEN_S = 10.0  # the open rate opens the top step in about this long
# ...but no faster than one server core handshakes, and slower past one process, where an
# opening costs more per connection (harness/data/measured.toml says what was measured)
WS_BENCH_OPEN_RATE_MAX = measured_value("ws_bench.open_rate_max", "connections/s")
WS_BENCH_OPEN_RATE_MAX_WORKERS = measured_value("ws_bench.open_rate_max_workers", "connections/s")
IDLE_S = 2.0  # after the app is ready, before the first connection: its idle CPU read
READ_AT_HOLD_SHARE = 1 / 3  # each hold's reading: this far into it


def minimal_ws_command(framework: str) -> str:
    """The minimal WebSocket server's command template (a harness-picked port)."""
    return (
        f"{{python}} -m servers.minimal {framework} --ws --host {{host}} --port {{port}} "
        "--workers {workers}"
    )


def ws_workers(connections: int, open_files: int) -> int:
    """Server processes for `connections` idle connections: one while they fit one
    process's `open_files` (less FD_HEADROOM), else as many as SO_REUSEPORT's uneven
    spread over them needs (REUSEPORT_SPREAD, as harness plan-connections plans)."""
    per_process = max(1, open_files - FD_HEADROOM)
    if connections <= per_process:
        return 1
    return math.ceil(connections * REUSEPORT_SPREAD / per_process)


def ws_bench_unsupported(framework: str) -> str | None:
    """Why `framework` has no WebSocket bench (no minimal WebSocket server), or None."""
    if framework in WEBSOCKET_MINIMALS and FRAMEWORKS[framework].origin == "builtin":
        return None
    return (
        f"{framework} has no minimal WebSocket server (servers/minimal has "
        f"{', '.join(WEBSOCKET_MINIMALS)})"
    )


# -- one app's run (I/O) -------------------------------------------------------------------
def _cpu_s(server: ServerProcess, group: Cgroup | None) -> float:
    """The app's CPU seconds so far: its cgroup's counter, or its process tree's clocks."""
    if group is not None:
        return group.read().cpu_s
    total = 0.0
    for pid in listeners.tree_pids(server.pid):
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _rss_bytes(server: ServerProcess) -> int:
    total = 0
    for pid in listeners.tree_pids(server.pid):
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total


@contextmanager
def _app_group(server_cpus: str) -> Iterator[Cgroup | None]:
    """A cgroup of its own for one app, pinned to `server_cpus` (None where the run may
    make none: the app is then pinned by taskset); removed after."""
    support = run_support()
    group = None
    if support.usable:
        try:
            group = Cgroup.create(support, "server", cpus=server_cpus)
        except OSError:
            group = None
    try:
        yield group
    finally:
        if group is not None:
            group.remove()


def _start_app(
    framework: str,
    app: str,
    loop: str | None,
    server_cpus: str,
    group: Cgroup | None,
    *,
    workers: int,
    host: str,
) -> ServerProcess:
    cpus = None if group is not None else server_cpus  # the group's cpuset pins it
    if app == "ours":
        return start_server(
            framework, loop=loop, cpus=cpus, cgroup=group, workers=workers, host=host
        )
    return start_command_server(
        FRAMEWORKS[framework],
        minimal_ws_command(framework),
        cpus=cpus,
        cgroup=group,
        workers=workers,
        host=host,
    )


class _HoldReadings:
    """What one app's run reads as its ramp goes: the app's memory a third of the way
    into each hold (a timer per hold), the connections each step held, and the app's CPU
    when the top step's hold begins (the opening's end)."""

    def __init__(
        self, server: ServerProcess, group: Cgroup | None, ramp: ConnectionRamp,
        watch: BenchWatch | None,
    ) -> None:  # fmt: skip
        self._server, self._group, self._watch = server, group, watch
        self._hold_s = ramp.hold_s
        self._top = len(list(ramp)) - 1
        self._timers: list[threading.Timer] = []
        self.memory: dict[int, HeldStep] = {}  # by step index
        self.held_open: dict[int, int] = {}  # connections held, by step target
        self.top_cpu: tuple[float, float] | None = None  # (monotonic s, the app's CPU s)

    def on_step(self, index: int, offered: float) -> None:
        """A hold began: its memory is read READ_AT_HOLD_SHARE into it."""
        if self._watch is not None:
            self._watch.step_started(index, offered, "conns")
        if index == self._top:  # the opening ends: its CPU
            cpu_s = _cpu_s(self._server, self._group)
            self.top_cpu = (time.monotonic(), cpu_s)
        timer = threading.Timer(self._hold_s * READ_AT_HOLD_SHARE, self._read_memory, (index,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def on_step_done(self, step: Step) -> None:
        """A hold ended: the connections it held."""
        self.held_open[int(step.offered)] = step.figures.open or 0
        if self._watch is not None:
            self._watch.step_finished(step)

    def join(self) -> None:
        """Wait for every reading begun."""
        for timer in self._timers:
            timer.join()

    def _read_memory(self, index: int) -> None:
        memory = self._group.read().memory_bytes if self._group is not None else None
        self.memory[index] = HeldStep(0, memory, _rss_bytes(self._server))


def _idle_cpu_per_s(server: ServerProcess, group: Cgroup | None) -> float:
    """The app's CPU seconds per second over IDLE_S idle: what its timers cost."""
    idle_from = (time.monotonic(), _cpu_s(server, group))
    time.sleep(IDLE_S)
    idle_to = (time.monotonic(), _cpu_s(server, group))
    return (idle_to[1] - idle_from[1]) / (idle_to[0] - idle_from[0])


def _start_agents(
    ramp: ConnectionRamp, topology: Topology, agent_cpus: str | None, raw_dir: Path,
    workers: int, fleet: Fleet | None,
) -> AgentGroup:  # fmt: skip
    """The ramp's agents (the ws-idle scenario): here, or on `fleet`'s hosts."""
    scenario = SCENARIOS["ws-idle"]
    if fleet is None:
        return LocalAgents.for_ramp(ramp, scenario, topology, agent_cpus, raw_dir, workers)
    from harness.fleet.agents import FleetAgents  # Dask's client only when asked for

    return FleetAgents(fleet, ramp, scenario, topology, agent_cpus, raw_dir, workers)


def ws_app_run(
    framework: str,
    app: str,
    *,
    loop: str | None,
    server_cpus: str,
    agent_cpus: str | None,
    ramp: ConnectionRamp,
    raw_dir: Path,
    workers: int = 1,
    fleet: Fleet | None = None,
    watch: BenchWatch | None = None,
) -> WsAppRun:
    """Start `app` (ours or minimal) afresh in its own cgroup, hold the ramp's idle
    connections with the agent, read its memory at each hold and its CPU over the opening
    (module docstring); it is stopped and its cgroup removed before this returns."""
    host = fleet.server_address if fleet is not None else "127.0.0.1"
    model = parse_process_model(f"workers:{workers}") if workers > 1 else ProcessModel("single")
    with _app_group(server_cpus) as group:
        server = _start_app(framework, app, loop, server_cpus, group, workers=workers, host=host)
        topology = Topology(model, [server], instance_cpus=[server_cpus])
        monitor = Monitor(server.latest_telemetry, on_sample=watch.sample if watch else None)
        readings = _HoldReadings(server, group, ramp, watch)
        try:
            monitor.set_server_cgroup(group)
            monitor.start(topology.pids)
            idle_cpu_per_s = _idle_cpu_per_s(server, group)
            agents = _start_agents(ramp, topology, agent_cpus, raw_dir, workers, fleet)
            start_cpu_s = _cpu_s(server, group)
            start_cpu = (time.monotonic(), start_cpu_s)
            result = run_connection_ramp(
                ramp=ramp, agents=agents, server=topology, monitor=monitor,
                baseline_rss_bytes=None, on_step=readings.on_step,
                on_step_done=readings.on_step_done,
            )  # fmt: skip
        finally:
            readings.join()
            monitor.stop()
            topology.stop()
        if result.server_exit is not None:
            raise UserError(
                f"{framework} {app} WebSocket server ended during the ramp "
                f"({result.server_exit}): {server.stderr_tail()}"
            )
    cpu_us = None
    if readings.top_cpu is not None:
        (start_t, start_s), (top_t, top_s) = start_cpu, readings.top_cpu
        opened = result.steps[-1].replies if result.steps else 0
        idle_cpu_s = idle_cpu_per_s * (top_t - start_t)
        cpu_us = cpu_us_per_connection(start_s, top_s, opened, idle_cpu_s=idle_cpu_s)
    return _app_run_figures(app, ramp, readings, result, cpu_us, by_cgroup=group is not None)


def _app_run_figures(
    app: str, ramp: ConnectionRamp, readings: _HoldReadings, result: ConnectionRampResult,
    cpu_us: float | None, *, by_cgroup: bool,
) -> WsAppRun:  # fmt: skip
    """One app's run from its ramp and what was read at each hold."""
    targets = [int(step.offered) for step in ramp]
    points = [
        dataclasses.replace(readings.memory[index], connections=readings.held_open.get(target, 0))
        for index, target in enumerate(targets)
        if index in readings.memory and readings.held_open.get(target)
    ]
    last = result.steps[-1] if result.steps else None
    cgroup_points = [(p.connections, p.cgroup_bytes) for p in points if p.cgroup_bytes is not None]
    return WsAppRun(
        app=app,
        target=targets[-1],
        held=readings.held_open.get(targets[-1], 0),
        opened=last.replies if last is not None else 0,
        failed=int(last.errors["total"]) if last is not None else 0,
        kb_per_connection=slope_kb_per_connection(cgroup_points) if by_cgroup else None,
        rss_kb_per_connection=slope_kb_per_connection(
            [(p.connections, p.rss_bytes) for p in points]
        ),
        cpu_us_per_connection=cpu_us,
        cpu_source="cgroup" if by_cgroup else "process tree",
        cut_short=result.watchdog_note,
        failed_reasons=failed_reasons_of(last.errors) if last is not None else {},
    )


def ws_ramp(
    connections: int, hold_s: float, open_rate_per_s: float | None, workers: int = 1
) -> ConnectionRamp:
    """WS_BENCH_STEPS equal steps up to `connections` (fewer below that many), each held
    `hold_s`, opened at `open_rate_per_s` (default: the top in WS_BENCH_OPEN_S, at most
    WS_BENCH_OPEN_RATE_MAX, or WS_BENCH_OPEN_RATE_MAX_WORKERS past one process)."""
    step = max(1, connections // WS_BENCH_STEPS)
    start = connections - step * (min(WS_BENCH_STEPS, connections) - 1)  # the top: exact
    cap = WS_BENCH_OPEN_RATE_MAX if workers <= 1 else WS_BENCH_OPEN_RATE_MAX_WORKERS
    rate = open_rate_per_s or min(cap, max(1.0, connections / WS_BENCH_OPEN_S))
    return ConnectionRamp(
        start=start, target=connections, step=step, hold_s=hold_s, open_rate_per_s=rate
    )


def bench_ws_framework(
    framework: str,
    *,
    loop: str | None = None,
    server_cpus: str = "0",
    agent_cpus: str | None = "1",
    connections: int = WS_BENCH_CONNECTIONS,
    rounds: int = WS_BENCH_ROUNDS,
    hold_s: float = WS_BENCH_HOLD_S,
    open_rate_per_s: float | None = None,
    workers: int = 1,
    fleet: Fleet | None = None,
    watch: BenchWatch | None = None,
) -> WsBenchResult:
    """`rounds` rounds of ours and the minimal WebSocket server, the order alternating,
    each app afresh per run as `workers` processes, the agents here or on `fleet`'s hosts
    (module docstring)."""
    why = ws_bench_unsupported(framework)
    if why is not None:
        raise UserError(f"bench --ws {framework}: {why}")
    ramp = ws_ramp(connections, hold_s, open_rate_per_s, workers)
    runs: dict[str, list[WsAppRun]] = {app: [] for app in APPS}
    with scratch.temporary_directory("bench-ws") as raw:
        for round_index in range(rounds):
            order = APPS if round_index % 2 == 0 else tuple(reversed(APPS))
            for app in order:
                with app_run(watch, app, round_index, steps=len(list(ramp))):
                    runs[app].append(
                        ws_app_run(
                            framework, app, loop=loop, server_cpus=server_cpus,
                            agent_cpus=agent_cpus, ramp=ramp,
                            raw_dir=Path(raw) / f"{app}-{round_index}",
                            workers=workers, fleet=fleet, watch=watch,
                        )
                    )  # fmt: skip
            if watch is not None:
                ws_round_finished(watch, runs["ours"], runs["minimal"])
    load = "local" if fleet is None else f"fleet of {len(fleet.hosts)} hosts"
    return ws_bench_summary(
        framework, loop, runs["ours"], runs["minimal"], server_processes=workers, load=load
    )

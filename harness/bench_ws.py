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
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from drivers.agent.plan import FD_HEADROOM
from harness.bench_live import BenchWatch, app_run, ws_round_finished
from harness.cgroups.groups import Cgroup, run_support
from harness.connection_plan import REUSEPORT_SPREAD
from harness.connections import AgentGroup, LocalAgents, run_connection_ramp
from harness.monitor import Monitor
from harness.server_process import ServerProcess, start_command_server, start_server
from harness.stats import Interval, paired_ratio_interval
from harness.topology import ProcessModel, Topology, parse_process_model
from model.errors import UserError
from model.ramps import ConnectionRamp
from model.scenarios import SCENARIOS
from servers import FRAMEWORKS, listeners, scratch
from servers.minimal import WEBSOCKET_MINIMALS

if TYPE_CHECKING:
    from harness.fleet.client import Fleet

WS_BENCH_CONNECTIONS = 15_000
WS_BENCH_ROUNDS = 3
WS_BENCH_STEPS = 5
WS_BENCH_HOLD_S = 3.0
WS_BENCH_OPEN_S = 10.0  # the open rate opens the top step in about this long
# ...but no faster than one server core handshakes: 290-520 µs of CPU per opened connection
# on this machine (15,000 connections, quiet), so ~2,000 a second at most; 1,500 a
# second is the rate the 15,000 table ran at
WS_BENCH_OPEN_RATE_MAX = 1_500.0
# ...and past one process (the apps as workers, ~100,000 connections), 800 a second: there
# the opening costs more per connection (tornado 950 µs ours, 870 µs minimal at 100,000 on
# a local fleet, 2026-12-05), so at 1,500 a second the workers' accept queues grew for the
# whole step and 17-413 handshakes a round waited past the agent's 10 s; at 800 none did
# (tornado and gevent, 2 rounds each, every connection held)
WS_BENCH_OPEN_RATE_MAX_WORKERS = 800.0
RATIO_LIMIT = 1.25  # the bench's bar: ours within 1.25× of the minimal server
IDLE_S = 2.0  # after the app is ready, before the first connection: its idle CPU read
READ_AT_HOLD_SHARE = 1 / 3  # each hold's reading: this far into it
APPS = ("ours", "minimal")


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


# -- figures (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class HeldStep:
    """One held step of one app's run: connections open and the app's memory then."""

    connections: int
    cgroup_bytes: int | None
    rss_bytes: int


@dataclass(frozen=True)
class WsAppRun:
    """One app's run in one round: what it held and what that cost it."""

    app: str  # ours or minimal
    target: int  # connections asked for at the top step
    held: int  # connections open at the top step
    opened: int  # handshakes completed up to the top step
    failed: int  # connections that failed or that the app dropped
    kb_per_connection: float | None  # cgroup memory slope
    rss_kb_per_connection: float | None  # process-tree RSS slope (the cross-check)
    cpu_us_per_connection: float | None  # CPU from the first connection to the top hold
    cpu_source: str  # cgroup or process tree
    # why the ramp ended before its top step's hold (the agents' watchdogs), if it did
    cut_short: str | None = None
    # `failed` by reason: failed_<why> (never opened) and closed_<why> (dropped by the app)
    failed_reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.app not in APPS:
            raise ValueError(f"app {self.app!r} is not one of {APPS}")
        if min(self.target, self.held, self.opened, self.failed) < 0:
            raise ValueError(f"negative connection counts in {self}")


def slope_kb_per_connection(points: list[tuple[int, float]]) -> float | None:
    """KB per connection: the least-squares slope of bytes over open connections; None
    with fewer than two distinct connection counts."""
    if len({x for x, _ in points}) < 2:
        return None
    xs = [float(x) for x, _ in points]
    slope = statistics.linear_regression(xs, [float(y) for _, y in points]).slope
    return round(slope / 1024, 3)


def cpu_us_per_connection(
    cpu_before_s: float, cpu_after_s: float, opened: int, idle_cpu_s: float = 0.0
) -> float | None:
    """CPU µs per opened connection over a span, less `idle_cpu_s` (what the app spends
    idle over as long: its timers); None when none opened."""
    if opened <= 0:
        return None
    return round(max(0.0, cpu_after_s - cpu_before_s - idle_cpu_s) / opened * 1e6, 2)


def verdict(interval: Interval | None, limit: float = RATIO_LIMIT) -> tuple[str, str | None]:
    """The ratio against `limit`: `within` when its 95 % interval lies at or under it,
    `above` when wholly over it, else `undecided` with the reason."""
    if interval is None:
        return "undecided", "no interval: fewer than two rounds with both figures"
    if interval.high <= limit:
        return "within", None
    if interval.low > limit:
        return "above", None
    return "undecided", (
        f"the 95 % interval [{interval.low:.2f}, {interval.high:.2f}] straddles {limit:g}×: "
        "more rounds narrow it"
    )


@dataclass(frozen=True)
class WsRatio:
    """ours / minimal for one figure: the rounds' means, the paired ratio and its
    interval, and the verdict against RATIO_LIMIT."""

    ours: float | None
    minimal: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    verdict: str  # within, above, undecided
    reason: str | None = None


def ws_ratio(ours: list[float | None], minimal: list[float | None]) -> WsRatio:
    """The paired figure of the rounds (`ours[i]` and `minimal[i]` ran in round i)."""
    interval = paired_ratio_interval(ours, minimal)  # type: ignore[arg-type]
    ours_known = [v for v in ours if v is not None]
    minimal_known = [v for v in minimal if v is not None]
    ours_mean = round(statistics.fmean(ours_known), 3) if ours_known else None
    minimal_mean = round(statistics.fmean(minimal_known), 3) if minimal_known else None
    ratio = interval.value if interval else None
    if ratio is None and ours_mean and minimal_mean and minimal_mean > 0:
        ratio = ours_mean / minimal_mean
    word, reason = verdict(interval)
    return WsRatio(
        ours_mean,
        minimal_mean,
        round(ratio, 4) if ratio is not None else None,
        interval.rounded(4).as_pair() if interval else None,
        word,
        reason,
    )


@dataclass(frozen=True)
class WsBenchResult:
    """Our server against the minimal WebSocket server of its runtime, over the rounds."""

    framework: str
    loop: str | None
    connections: int  # asked for at the top step
    rounds: int
    memory: WsRatio  # KB per connection (cgroup; RSS where there is no cgroup)
    memory_source: str  # cgroup or rss
    rss: WsRatio  # KB per connection by RSS: the cross-check
    cpu: WsRatio  # CPU µs per opened connection
    cpu_source: str  # cgroup or process tree
    ours_held_min: int  # the fewest connections each app held at the top step, of its rounds
    minimal_held_min: int
    failed: dict[str, int]  # connections failed or dropped, per app, over every round
    # the same by reason, per app, over every round (failed_<why>, closed_<why>)
    failed_reasons: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    ours_runs: tuple[WsAppRun, ...] = ()  # each round's figures (round i: [i] of each)
    minimal_runs: tuple[WsAppRun, ...] = ()
    server_processes: int = 1  # each app's processes on the port (workers)
    load: str = "local"  # where the agents ran: here, or the fleet's hosts

    @property
    def note(self) -> str | None:
        """What makes the figures partial: an app that did not hold every connection."""
        short = [
            f"{app} held {held:,} of {self.connections:,}"
            for app, held in (("ours", self.ours_held_min), ("minimal", self.minimal_held_min))
            if held < self.connections
        ]
        failed = [
            f"{app} {count:,} failed{_reasons_said(self.failed_reasons.get(app, {}))}"
            for app, count in self.failed.items()
            if count
        ]
        runs = self.ours_runs + self.minimal_runs
        cut = list(dict.fromkeys(f"{r.app}: {r.cut_short}" for r in runs if r.cut_short))
        return "; ".join(short + failed + cut) or None


def _reasons_said(reasons: dict[str, int]) -> str:
    """' (handshake_timeout 200, closed_reset 14)': the failures by reason, most first."""
    if not reasons:
        return ""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return " (" + ", ".join(f"{why.removeprefix('failed_')} {n:,}" for why, n in ranked) + ")"


def failed_reasons_of(errors: dict[str, float]) -> dict[str, int]:
    """A connection step's errors by reason (its `total` left out, zeros dropped)."""
    return {why: int(n) for why, n in errors.items() if why != "total" and n}


def _sum_reasons(runs: list[WsAppRun]) -> dict[str, int]:
    return dict(sum((Counter(r.failed_reasons) for r in runs), Counter()))


def ws_bench_summary(
    framework: str,
    loop: str | None,
    ours: list[WsAppRun],
    minimal: list[WsAppRun],
    *,
    server_processes: int = 1,
    load: str = "local",
) -> WsBenchResult:
    """The bench's figures from its paired runs (`ours[i]` and `minimal[i]`: round i). A
    round where either app held fewer connections than asked is still counted, and said
    (`note`); its verdicts are then `undecided`."""
    if not ours or len(ours) != len(minimal):
        raise ValueError(f"{len(ours)} runs of ours and {len(minimal)} of minimal: need pairs")
    by_cgroup = all(r.kb_per_connection is not None for r in ours + minimal)
    memory = ws_ratio(
        [r.kb_per_connection if by_cgroup else r.rss_kb_per_connection for r in ours],
        [r.kb_per_connection if by_cgroup else r.rss_kb_per_connection for r in minimal],
    )
    rss = ws_ratio(
        [r.rss_kb_per_connection for r in ours], [r.rss_kb_per_connection for r in minimal]
    )
    cpu = ws_ratio(
        [r.cpu_us_per_connection for r in ours], [r.cpu_us_per_connection for r in minimal]
    )
    target = ours[0].target
    result = WsBenchResult(
        framework,
        loop,
        target,
        len(ours),
        memory,
        "cgroup" if by_cgroup else "rss",
        rss,
        cpu,
        ours[0].cpu_source,
        min(r.held for r in ours),
        min(r.held for r in minimal),
        {"ours": sum(r.failed for r in ours), "minimal": sum(r.failed for r in minimal)},
        {"ours": _sum_reasons(ours), "minimal": _sum_reasons(minimal)},
        tuple(ours),
        tuple(minimal),
        server_processes,
        load,
    )
    note = result.note
    if note is None:
        return result
    return dataclasses.replace(
        result,
        **{
            name: dataclasses.replace(figure, verdict="undecided", reason=note)
            for name, figure in (("memory", memory), ("rss", rss), ("cpu", cpu))
        },
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
    scenario = SCENARIOS["ws-idle"]
    targets = [int(step.offered) for step in ramp]
    top = len(targets) - 1
    readings: dict[int, HeldStep] = {}
    held_open: dict[int, int] = {}
    cpu_at: dict[str, float] = {}
    timers: list[threading.Timer] = []
    host = fleet.server_address if fleet is not None else "127.0.0.1"
    model = parse_process_model(f"workers:{workers}") if workers > 1 else ProcessModel("single")
    with _app_group(server_cpus) as group:
        server = _start_app(framework, app, loop, server_cpus, group, workers=workers, host=host)
        topology = Topology(model, [server], instance_cpus=[server_cpus])
        monitor = Monitor(server.latest_telemetry, on_sample=watch.sample if watch else None)
        try:
            monitor.set_server_cgroup(group)
            monitor.start(topology.pids)
            idle_from = (time.monotonic(), _cpu_s(server, group))
            time.sleep(IDLE_S)  # the app idle: what its timers cost per second
            idle_to = (time.monotonic(), _cpu_s(server, group))
            idle_cpu_per_s = (idle_to[1] - idle_from[1]) / (idle_to[0] - idle_from[0])

            def read_memory(index: int) -> None:
                memory = group.read().memory_bytes if group is not None else None
                readings[index] = HeldStep(0, memory, _rss_bytes(server))

            def on_step(index: int, offered: float) -> None:
                if watch is not None:
                    watch.step_started(index, offered, "conns")
                if index == top:  # the opening ends: its CPU
                    cpu_at["top"] = _cpu_s(server, group)
                    cpu_at["top_t"] = time.monotonic()
                timer = threading.Timer(ramp.hold_s * READ_AT_HOLD_SHARE, read_memory, (index,))
                timer.daemon = True
                timers.append(timer)
                timer.start()

            agents: AgentGroup
            if fleet is None:
                agents = LocalAgents.for_ramp(
                    ramp, scenario, topology, agent_cpus, raw_dir, workers
                )
            else:  # Dask's client only when asked for
                from harness.fleet.agents import FleetAgents

                agents = FleetAgents(fleet, ramp, scenario, topology, agent_cpus, raw_dir, workers)
            cpu_at["start"] = _cpu_s(server, group)
            cpu_at["start_t"] = time.monotonic()
            result = run_connection_ramp(
                ramp=ramp,
                agents=agents,
                server=topology,
                monitor=monitor,
                baseline_rss_bytes=None,
                on_step=on_step,
                on_step_done=lambda step: (
                    held_open.__setitem__(int(step.offered), step.figures.open),
                    watch is not None and watch.step_finished(step),
                ),
            )
        finally:
            for timer in timers:
                timer.join()
            monitor.stop()
            topology.stop()
        if result.server_exit is not None:
            raise UserError(
                f"{framework} {app} WebSocket server ended during the ramp "
                f"({result.server_exit}): {server.stderr_tail()}"
            )
    steps = result.steps
    points = [
        dataclasses.replace(readings[index], connections=held_open.get(target, 0))
        for index, target in enumerate(targets)
        if index in readings and held_open.get(target)
    ]
    last = steps[-1] if steps else None
    opened = last.replies if last is not None else 0
    failed = int(last.errors["total"]) if last is not None else 0
    cgroup_points = [(p.connections, p.cgroup_bytes) for p in points if p.cgroup_bytes is not None]
    return WsAppRun(
        app=app,
        target=targets[-1],
        held=held_open.get(targets[-1], 0),
        opened=opened,
        failed=failed,
        kb_per_connection=slope_kb_per_connection(cgroup_points) if group is not None else None,
        rss_kb_per_connection=slope_kb_per_connection(
            [(p.connections, p.rss_bytes) for p in points]
        ),
        cpu_us_per_connection=(
            cpu_us_per_connection(
                cpu_at["start"],
                cpu_at["top"],
                opened,
                idle_cpu_s=idle_cpu_per_s * (cpu_at["top_t"] - cpu_at["start_t"]),
            )
            if "top" in cpu_at
            else None
        ),
        cpu_source="cgroup" if group is not None else "process tree",
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

"""What limited a step: the noise on its CPUs (other processes, the harness itself), the
load generator's and the server's saturation, the CPU quota, the database, and the
schedule an open-loop driver kept.

Pure functions of results and clock readings (no server, no /proc), unit-tested without a
network.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from drivers.base import Driver, DriverResult
from harness.monitor import CpuSnapshot
from model.figures import figure
from model.ramps import RampStep
from model.results import Step
from servers import contract

DRIVER_BOUND_CPU_FRACTION = 0.90
SERVER_SATURATED_CPU_FRACTION = 0.90
# The event loop's 10 ms timer fired, on average over the step, a whole interval late: the
# loop never waited for work. (The average, not the maximum: one GC pause or one moment
# descheduled reaches a high maximum in a loop that otherwise idles.)
SATURATED_TICK_AVG_MS = contract.TICK_INTERVAL_S * 1000.0
# The contract's own mark of a sink too far behind (WebSocket messages waiting for inserts)
DATABASE_BACKLOG_RECORDS = contract.WS_SINK_MAX_PENDING
CONTENDED_CPU_PCT = 10.0  # of one core, used by other processes on the server's or load's CPUs
DATABASE_BOUND_CPU_FRACTION = 0.90  # of the database's cores (one unless --db-cpus)
SERVER_HEADROOM_FRACTION = 0.90  # below this share of its cores the server had headroom
RATE_ACHIEVED_FRACTION = 0.95  # autobench: a step holds when it achieved 95 % of the demand
SCHEDULE_KEPT_FRACTION = 0.98  # an open-loop driver keeps its schedule within 2 %
CPU_WAIT_CONTENDED_PCT = 10.0  # % of a core spent runnable, waiting for a CPU someone held
# a server held back by its CPU quota in this share of the step's CFS periods was saturated
THROTTLED_SATURATED_SHARE = 0.10


def cpu_us_per_req(cpu_s: float | None, replies: int) -> float | None:
    """CPU µs per reply (None without a CPU reading or a reply), to 0.1 µs."""
    if cpu_s is None or replies <= 0:
        return None
    return round(cpu_s / replies * 1e6, 1)


def reaped_cpu_s(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """The CPU seconds of the children reaped between two snapshots (a local step's load
    generators, which end and are reaped inside the step's window; their own children
    included); None without both."""
    if before is None or after is None:
        return None
    return max(0.0, after.reaped_s - before.reaped_s)


def throttled(counted: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A step's throttling from what its cgroup counted (harness.monitor.cgroup_step):
    periods held back, of the periods with work, and the time; None when never held."""
    if not counted or not counted.get("throttled_periods"):
        return None
    return {
        "periods": counted["throttled_periods"],
        "of_periods": counted.get("periods", 0),
        "time_s": counted.get("throttled_s", 0.0),
    }


def oom_reason(oom_kills: int, memory_max_bytes: int | None) -> str | None:
    """A case's failure when the kernel killed processes of the server's cgroup for its
    memory (None when it killed none)."""
    if oom_kills <= 0:
        return None
    limit = (
        f"its limit, --memory-max {memory_max_bytes / 2**20:g} MiB"
        if memory_max_bytes
        else ("a limit above it")
    )
    return (
        f"out of memory: the server's cgroup reached {limit}, and the kernel killed "
        f"{oom_kills} of its processes"
    )


def throttle_share(step: Step) -> float:
    """The share of a step's CFS periods in which its quota held the server back (0 when
    unthrottled or unknown)."""
    counted = step.figures.cgroup
    periods = counted.periods if counted is not None else 0
    return counted.throttled_periods / periods if counted is not None and periods else 0.0


def other_cpu_pct(
    busy_s: Mapping[int, float],
    known: Iterable[tuple[float, frozenset[int]]],
    cpus: frozenset[int],
    window_s: float,
) -> float:
    """What processes the harness does not know used on `cpus`, in % of one core.

    `busy_s`: each CPU's busy seconds over the window (/proc/stat); `known`: the CPU seconds
    over the window of each process the harness knows, with the CPUs it may run on. A
    process's time is not split by CPU anywhere in /proc, so every known process that *may*
    run on `cpus` is subtracted in full: exact when each is pinned inside or outside
    `cpus` (server and load pinned apart, the usual case), a lower bound when one floats
    (an unpinned side, FerretDB or memcached) — the harness's own work is never called
    someone else's. Kernel threads (ksoftirqd handling loopback traffic) count as others.
    """
    spent = sum(busy_s.get(cpu, 0.0) for cpu in cpus)
    ours = sum(cpu_s for cpu_s, allowed in known if allowed & cpus)
    return round(max(0.0, 100.0 * (spent - ours) / window_s), 1) if window_s > 0 else 0.0


def step_noise(
    before: CpuSnapshot,
    after: CpuSnapshot,
    *,
    server_cpus: frozenset[int],
    load_cpus: frozenset[int],
    reaped_cpus: frozenset[int],
    outside_tree_s: float = 0.0,
) -> dict[str, Any]:
    """From the CPU clocks at a step's start and end: `other_cpu_pct` (`server`, `load`:
    what other processes used on the server's and the load's CPUs, % of one core) and
    `harness_cpu_pct` (the harness's own threads). `reaped_cpus`: where the children that
    ended in the step ran (the load generators' CPUs). `outside_tree_s`: what the server's
    cgroup counted beyond its process tree (a daemon it forked: the server's, not
    another's), on the server's CPUs."""
    window_s = after.t - before.t
    busy = {cpu: after.busy_s[cpu] - before.busy_s.get(cpu, 0.0) for cpu in after.busy_s}
    harness_s = after.harness_s - before.harness_s
    known = [(harness_s, after.harness_cpus), (after.reaped_s - before.reaped_s, reaped_cpus)]
    if outside_tree_s > 0:
        known.append((outside_tree_s, server_cpus))
    for pid, now in after.descendants.items():
        then = before.descendants.get(pid)
        known.append((now.cpu_s - (then.cpu_s if then else 0.0), now.cpus))
    for pid, then in before.descendants.items():
        if pid not in after.descendants:  # it ended: its parent's reaped time has it all
            known.append((-then.cpu_s, then.cpus))
    return {
        "other_cpu_pct": {
            "server": other_cpu_pct(busy, known, server_cpus, window_s),
            "load": other_cpu_pct(busy, known, load_cpus, window_s),
        },
        "harness_cpu_pct": round(100.0 * harness_s / window_s, 1) if window_s > 0 else 0.0,
    }


def is_contended(noise: Mapping[str, Any]) -> bool:
    """Other processes used more than 10 % of a core on the server's or the load's CPUs."""
    return any(pct > CONTENDED_CPU_PCT for pct in noise["other_cpu_pct"].values())


def is_driver_bound(
    driver: Driver,
    result: DriverResult,
    step: RampStep,
    *,
    agent_cpu_pct: float | None,
    load_cpu_count: int,
    calls_per_connection: int,
) -> bool:
    """The load generator was busy: its CPUs full, or (httperf, which spins whatever the
    load) short of the connection rate asked. A saturated server makes a driver spin and
    fall short too, so `step_bottleneck` asks about the server first."""
    if driver.busy_polls:
        asked = step.offered / calls_per_connection
        offered = result.figures.connection_rate_per_s
        return offered is not None and offered < RATE_ACHIEVED_FRACTION * asked
    if agent_cpu_pct is None:
        return False
    return agent_cpu_pct >= DRIVER_BOUND_CPU_FRACTION * 100.0 * load_cpu_count


def server_saturated(step: Step, *, server_cores: int, server_cpu_count: int) -> bool:
    """The server could do no more: its processes used ≥ 90 % of the cores they can use
    (`server_cores`: its CPUs, or its processes when fewer), or its CPUs were ≥ 90 % busy
    with it and other processes (a contended step), or its CPU quota held it back in ≥ 10 %
    of the step's periods (`throttled`), or its event loop ran behind."""
    cpu = step.server_cpu_pct
    others = (step.figures.other_cpu_pct or {}).get("server")
    if cpu is not None:
        if cpu >= SERVER_SATURATED_CPU_FRACTION * 100.0 * server_cores:
            return True
        if others is not None and cpu + others >= (
            SERVER_SATURATED_CPU_FRACTION * 100.0 * server_cpu_count
        ):
            return True
    if throttle_share(step) >= THROTTLED_SATURATED_SHARE:  # its quota, not its cores, full
        return True
    tick_avg = step.tick_ms.get("avg")
    return tick_avg is not None and tick_avg >= SATURATED_TICK_AVG_MS


def step_bottleneck(
    step: Step, *, server_cores: int, server_cpu_count: int, driver_busy: bool
) -> str:
    """Which side limited the step, asked in this order:

    - `none`: a rate step that held its rate (≥ 95 %, no errors) was limited by nothing;
    - `os limit`: an OS limit capped it (`limit_capped`);
    - `database`: the sink refused records in the step or fell ≥ 1,024 records behind;
    - `server`: `server_saturated`;
    - `load generator`: the driver was busy (`is_driver_bound`) or could not offer the
      load (`driver_capped`) while the server was not saturated — a saturated server makes
      httperf spin too, so the server is asked first;
    - `none` again for an error-free step where no side was saturated (a closed loop at a
      concurrency both sides kept up with); `unknown` otherwise (errors nothing explains,
      or no CPU reading).
    """
    errors = step.errors["total"]
    held = step.achieved >= RATE_ACHIEVED_FRACTION * step.offered
    if step.unit == "req/s" and errors == 0 and held:
        return "none"
    if "limit_capped" in step.flags:
        return "os limit"
    sink_errors = step.figures.sink_errors_in_step or 0
    if sink_errors > 0 or (step.figures.backlog_max or 0) >= DATABASE_BACKLOG_RECORDS:
        return "database"
    if server_saturated(step, server_cores=server_cores, server_cpu_count=server_cpu_count):
        return "server"
    if driver_busy or "driver_capped" in step.flags:
        return "load generator"
    if errors == 0 and step.server_cpu_pct is not None:
        return "none"
    return "unknown"


def database_bound_note(
    steps: Sequence[Step], *, server_cores: int, database_cores: int
) -> str | None:
    """A note when, in some step, the database (FerretDB + PostgreSQL, `figures.db_cpu_pct`)
    used at least 90 % of its cores while the server used less than 90 % of its own: then
    the database, not the server, was the bottleneck. `database_cores` is one unless the
    database is pinned (FerretDB on one core is what a single client connection can use);
    `server_cores` is what the server can use (its processes, at most its CPUs)."""
    bound = [
        s
        for s in steps
        if s.figures.db_cpu_pct is not None
        and s.server_cpu_pct is not None
        and s.figures.db_cpu_pct >= DATABASE_BOUND_CPU_FRACTION * 100.0 * database_cores
        and s.server_cpu_pct < SERVER_HEADROOM_FRACTION * 100.0 * server_cores
    ]
    if not bound:
        return None
    worst = max(bound, key=lambda s: s.figures.db_cpu_pct)
    return (
        f"the database, not the server, was the bottleneck in {len(bound)} of {len(steps)} "
        f"steps: at {figure(worst.offered)} {worst.unit} FerretDB and PostgreSQL used "
        f"{worst.figures.db_cpu_pct:.0f} % CPU while the server used "
        f"{worst.server_cpu_pct:.0f} % (100 % is one core)"
    )


def behind_schedule(result: DriverResult, *, driver_limited: bool) -> bool:
    """An open-loop driver (oha) sent fewer than 98 % of the requests due, and the driver
    is to blame: it had a free connection, or it was short of CPU (`driver_limited`: it
    used ≥ 90 % of its CPUs or waited for them, and a driver that cannot run does not read
    replies, which keeps its connections busy too). The step is then `driver_capped`.
    With every connection busy and the driver running freely the server held them up: it
    is saturated, which the step's achieved rate says."""
    figures = result.figures
    if figures.sent_per_s is None or not figures.offered_per_s:
        return False
    short = figures.sent_per_s < SCHEDULE_KEPT_FRACTION * figures.offered_per_s
    connection_free = (figures.max_in_flight or 0) < (figures.connections or 0)
    return short and (connection_free or driver_limited)


def cpu_contended(stats: Mapping[str, float | None]) -> tuple[bool, bool]:
    """(anyone, the driver): whether the server or the load generator, and whether the load
    generator itself, waited ≥ 10 % of a core for a CPU another process held."""
    waits = {key: stats.get(key) for key in ("server_cpu_wait_pct", "agent_cpu_wait_pct")}
    over = {key: w is not None and w >= CPU_WAIT_CONTENDED_PCT for key, w in waits.items()}
    return any(over.values()), over["agent_cpu_wait_pct"]

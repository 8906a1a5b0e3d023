"""From steps to figures: the noise and the bottleneck of a step, the peak, repeats
combined, confirmation rounds and their intervals, ratios to nginx.

Pure functions of results and clock readings (no server, no /proc), unit-tested without a
network.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from drivers import histograms as hdr
from drivers.base import Driver, DriverResult
from harness.monitor import CpuSnapshot
from harness.run.precision import (
    case_precise,
    exclusion_note,
    half_width_pct,
    imprecise_reason,
    noise_source,
    round_exclusions,
    stall_note,
)
from harness.stats import Interval, mean_interval, paired_ratio_interval
from model.figures import figure
from model.ramps import RampStep
from model.results import Case, Step, Summary
from servers import contract
from servers.contract import PROTOCOL_H1, PROTOCOL_H1_TLS

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
NOISY_SPREAD = 0.10
RATE_ACHIEVED_FRACTION = 0.95  # autobench: a step holds when it achieved 95 % of the demand
SCHEDULE_KEPT_FRACTION = 0.98  # an open-loop driver keeps its schedule within 2 %
CPU_WAIT_CONTENDED_PCT = 10.0  # % of a core spent runnable, waiting for a CPU someone held
KNEE_FACTOR = 3.0  # p99 this many times its floor...
KNEE_MARGIN_MS = 1.0  # ...and this much above it is off the floor
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


def step_holds(step: Step, saturation_p99_ms: float | None = None) -> bool:
    """A rate step held: no errors, ≥ 95 % of the offered rate achieved (autobench's
    reading) and, when a ceiling is given, p99 under it."""
    if step.errors["total"] or step.achieved < RATE_ACHIEVED_FRACTION * step.offered:
        return False
    if saturation_p99_ms is None:
        return True
    p99 = step.latency_ms.get("p99")
    return p99 is not None and p99 <= saturation_p99_ms


def find_knee(steps: Sequence[Step]) -> dict[str, float | None] | None:
    """The knee of a rate ramp: the offered rate where p99 leaves its floor.

    A step's floor is the lowest p99 of the held steps before it (light loads set it; a
    spike cannot lower it). A step is off the floor when it did not hold (`step_holds`)
    or its p99 exceeds both KNEE_FACTOR (3) × the floor and the floor + KNEE_MARGIN_MS
    (1 ms: sub-millisecond jitter is not a knee). The knee is the first step from which
    every later step is off the floor — a lone spike that comes back down is not one.

    Returns `offered` (the knee step's rate) and `p99_ms` there, `last_on_floor` (the
    rate before it: the highest load still on the floor), `floor_p99_ms` and
    `threshold_ms`; None when there are no p99s or every step stays on the floor (the
    ramp ended below the knee). p99 here is the step's `latency_ms`: for oha, from each
    request's intended send.
    """
    steps = [s for s in steps if s.unit == "req/s"]
    if not steps or all(s.latency_ms.get("p99") is None for s in steps):
        return None

    def off_floor(step: Step, floor: float | None) -> bool:
        p99 = step.latency_ms.get("p99")
        if not step_holds(step) or p99 is None:
            return True
        if floor is None:  # nothing lighter held: this step sets the floor
            return False
        return p99 > max(KNEE_FACTOR * floor, floor + KNEE_MARGIN_MS)

    for index, step in enumerate(steps):
        held = [s.latency_ms["p99"] for s in steps[:index] if step_holds(s)]
        floor = min((p for p in held if p is not None), default=None)
        if all(off_floor(later, floor) for later in steps[index:]):
            threshold = max(KNEE_FACTOR * floor, floor + KNEE_MARGIN_MS) if floor else None
            return {
                "offered": step.offered,
                "p99_ms": step.latency_ms.get("p99"),
                "last_on_floor": steps[index - 1].offered if index else None,
                "floor_p99_ms": floor,
                "threshold_ms": round(threshold, 3) if threshold is not None else None,
            }
    return None


def connection_step_errors(steps: Sequence[Step]) -> list[int]:
    """Each connection step's own errors: the connections that failed or that the server
    closed while the step was opened and held.

    A connection step's `errors["total"]` counts from the ramp's start (the agents'
    counters never reset), so a step's own are the difference from the step before. Its
    `figures.errors_in_step` is not enough: it covers the hold only, and failures while the
    step was being opened fall between two holds, in neither. (Repeats combined take each
    step from the median run, so a difference may fall below 0: no step of one run; it is
    not read as error-free.)"""
    totals = [step.errors["total"] for step in steps]
    return [after - before for before, after in zip([0, *totals], totals, strict=False)]


def connection_peak_step(steps: Sequence[Step]) -> Step | None:
    """The peak step of a connection ramp: the highest step (by connections offered) with
    no error of its own (`connection_step_errors`) — the top step when none failed; None
    when every step had errors. Its `achieved` (the connections held) is the peak and its
    `offered` the load it was held at: value and load from the same step."""
    clean = [
        step
        for step, errors in zip(steps, connection_step_errors(steps), strict=True)
        if errors == 0
    ]
    return max(clean, key=lambda step: step.offered, default=None)


def summarize(steps: Sequence[Step]) -> Summary:
    """The peak (autobench's reading for rate ramps: the highest offered step with no errors
    that achieved ≥ 95 % of it; for concurrency: the best error-free req/s; for connection
    ramps: the highest step with no error of its own, `connection_peak_step`) and what was
    measured at that same step.

    Steps the load generator limited (`driver_bound`) measure the driver, so the peak is
    read from the others; when every candidate was driver-bound it is read from them and
    `limit_note` says so."""
    if not steps:
        return Summary()
    if steps[0].unit == "conns":
        best = connection_peak_step(steps)
        return _summary_at(best, best.achieved if best else None, steps, limit_note=None)
    clean = [s for s in steps if s.errors["total"] == 0]
    if steps[0].unit == "req/s":
        clean = [s for s in clean if s.achieved >= RATE_ACHIEVED_FRACTION * s.offered]
    server_limited = [s for s in clean if "driver_bound" not in s.flags]
    limit_note = None
    if clean and not server_limited:
        limit_note = (
            "the load generator limited every error-free step (driver_bound): "
            "the peak measures the driver, not the server"
        )
    candidates = server_limited or clean
    if steps[0].unit == "req/s":
        best = max(candidates, key=lambda s: s.offered, default=None)
        peak = best.offered if best else None
    else:
        best = max(candidates, key=lambda s: s.achieved, default=None)
        peak = best.achieved if best else None
    return _summary_at(best, peak, steps, limit_note=limit_note)


# Confirmation rounds of a concurrency ramp measure the plateau's first point: the lowest
# concurrency whose ramp reading came within this share of the best. One ramp step is one
# short reading (2 s in the quick profile) and which of two near-equal steps reads higher
# is noise: two quick compares of one commit put gevent's rounds at 50 connections in one
# (13,142 req/s) and at 200 in the next (12,067: its ramp read 12,177 at 50 and 12,516 at
# 200), a "significant" 8 % apart in harness diff; tornado likewise (7,509 against 6,902).
PLATEAU_FRACTION = 0.95


def _plateau_candidates(case: Case) -> list[Step]:
    """The ramp steps a rounds' load may be chosen from: error-free, and those the load
    generator limited left out (unless that leaves none), as for the peak (`summarize`)."""
    clean = [s for s in case.steps if s.errors["total"] == 0]
    return [s for s in clean if "driver_bound" not in s.flags] or clean


def rounds_offered(case: Case) -> float | None:
    """The load a case's confirmation rounds measure: the ramp's peak load, but for a
    concurrency ramp the lowest concurrency whose error-free reading came within
    PLATEAU_FRACTION of the best (steps the load generator limited left out, as for the
    peak: `summarize`); None without a peak."""
    offered = case.summary.peak_offered
    if offered is None or not case.steps or case.steps[0].unit != "concurrency":
        return offered
    candidates = _plateau_candidates(case)
    if not candidates:
        return offered
    best = max(s.achieved for s in candidates)
    return min(s.offered for s in candidates if s.achieved >= PLATEAU_FRACTION * best)


# A concurrency ramp whose error-free readings at several loads came within this share of
# the best is a tie its short steps cannot break: two quick compares of one commit put
# node-http's rounds at 200 connections in one (55,485 req/s, p99 119 ms; its ramp read
# 200 more than 5 % above 50) and at 50 in the next (62,514, p99 3.2 ms), which harness
# diff called 1.127× faster. Such a case's first round is tried at each tied load
# (`trial_loads`) and the rounds go on at the one `trial_choice` picks from those longer
# readings.
TIE_FRACTION = 0.85
MAX_TRIAL_LOADS = 3  # the tied loads tried: the ramp's best readings among them


def trial_loads(case: Case) -> list[float]:
    """The loads a concurrency case's first round is tried at, ascending: every error-free
    ramp load (steps the load generator limited left out) whose reading came within
    TIE_FRACTION of the best, at most MAX_TRIAL_LOADS of them (the best readings, always
    with `rounds_offered`'s choice); one load, or none, means no trial."""
    chosen = rounds_offered(case)
    if chosen is None or not case.steps or case.steps[0].unit != "concurrency":
        return []
    candidates = _plateau_candidates(case)
    best = max((s.achieved for s in candidates), default=0.0)
    tied = sorted(
        (s for s in candidates if s.achieved >= TIE_FRACTION * best and s.offered != chosen),
        key=lambda s: -s.achieved,
    )
    loads = [chosen, *dict.fromkeys(s.offered for s in tied)][:MAX_TRIAL_LOADS]
    return sorted(loads) if len(loads) > 1 else []


def trial_choice(readings: Mapping[float, float]) -> float:
    """The load the rounds go on at, from the first round's reading at each tied load
    (`{load: req/s}`): the lowest whose reading came within PLATEAU_FRACTION of the best,
    the rule `rounds_offered` applies to the ramp, now on round-length readings."""
    best = max(readings.values())
    return min(load for load, achieved in readings.items() if achieved >= PLATEAU_FRACTION * best)


def trial_note(steps: Sequence[Step]) -> str | None:
    """What a case's trial rounds read (`figures.trials` of its first round: `[[load, req/s],
    ...]`), for the summary; None without trials."""
    trials = next((s.figures.trials for s in steps if s.figures.trials), None)
    if not trials:
        return None
    chosen = next(s.offered for s in steps if s.figures.trials)
    read = ", ".join(f"{achieved:,.0f} req/s at {figure(load)}" for load, achieved in trials)
    return (
        f"rounds at concurrency {chosen:g}: the ramp's readings tied, the first round read {read}"
    )


def _summary_at(
    best: Step | None, peak: float | None, steps: Sequence[Step], *, limit_note: str | None
) -> Summary:
    """The summary of `steps` whose peak is `peak`, read at the step `best`: every figure
    "at peak" comes from that one step."""
    conns = steps[0].unit == "conns"
    rss = [s.rss_max_bytes for s in steps if s.rss_max_bytes is not None]
    return Summary(
        limit_note=limit_note,
        peak=peak,
        peak_unit="conns" if conns else "req/s",
        peak_offered=best.offered if best else None,
        p99_at_peak_ms=best.latency_ms.get("p99") if best else None,
        megabytes_per_s_at_peak=best.figures.megabytes_per_s if best else None,
        avg_latency_at_peak_ms=best.latency_ms.get("avg") if best else None,
        server_cpu_at_peak_pct=best.server_cpu_pct if best else None,
        cpu_us_per_req=best.cpu_us_per_req if best else None,
        agent_cpu_us_per_req=best.agent_cpu_us_per_req if best else None,
        rss_max_bytes=max(rss) if rss else None,
        # a connection step's total already holds every earlier step's
        errors_total=sum(connection_step_errors(steps))
        if conns
        else sum(s.errors["total"] for s in steps),
        flags=tuple(sorted({flag for s in steps for flag in s.flags})),
        knee=find_knee(steps) if steps[0].unit == "req/s" else None,
    )


def merged_latency(runs: Sequence[Step]) -> dict[str, object]:
    """The latency of several repeats of one step, read from their histograms added
    together (exact: every request of every repeat counts once): `histograms`,
    `latency_ms` and `latency_uncorrected_ms` as a Step has them. Empty when a repeat kept
    no histogram (then the median repeat's figures stand)."""
    merged: dict[str, object] = {}
    names = {name for step in runs for name in step.histograms}
    if not names or not all(set(step.histograms) == names for step in runs):
        return merged
    histograms = {}
    for name in sorted(names):
        histogram = hdr.merge([hdr.decode(step.histograms[name]) for step in runs])
        histograms[name] = hdr.encode(histogram)
        figures = {
            k: round(v, 3) if v is not None else None for k, v in hdr.latency_ms(histogram).items()
        }
        merged["latency_ms" if name == "latency" else "latency_uncorrected_ms"] = figures
    merged["histograms"] = histograms
    return merged


def combine_repeats(cases: Sequence[Case]) -> Case:
    """Several runs of one case as one: each step is the median run (by achieved), with
    the latency of every run (their histograms merged) where the driver kept them."""
    ok = [c for c in cases if c.status == "ok"]
    if len(cases) == 1 or not ok:
        return cases[0]
    steps = []
    for index in range(min(len(c.steps) for c in ok)):
        runs = sorted((c.steps[index] for c in ok), key=lambda s: s.achieved)
        median_step = runs[(len(runs) - 1) // 2]
        achieved = [s.achieved for s in runs]
        middle = statistics.median(achieved)
        spread = (max(achieved) - min(achieved)) / middle if middle else 0.0
        flags = set(median_step.flags)
        if spread > NOISY_SPREAD:
            flags.add("noisy")
        steps.append(
            dataclasses.replace(
                median_step,
                **merged_latency(runs),  # type: ignore[arg-type]
                achieved=round(middle, 1),
                flags=tuple(sorted(flags)),
                figures=dataclasses.replace(
                    median_step.figures,
                    repeats=len(runs),
                    achieved_runs=achieved,
                    spread=round(spread, 4),
                ),
            )
        )
    failures = tuple(c.error or "" for c in cases if c.status != "ok")
    peaks = [c.summary.memory_peak_bytes for c in ok if c.summary.memory_peak_bytes is not None]
    closings = [c.summary.closing for c in ok if c.summary.closing is not None]
    summary = dataclasses.replace(
        summarize(steps),
        repeats=len(cases),
        failed_repeats=failures,
        cgroup=ok[0].summary.cgroup,  # every repeat ran in the run's one cgroup mode
        memory_peak_bytes=max(peaks) if peaks else None,
        # a close storm's worst repeat: the stall a user may meet
        closing=max(closings, key=lambda c: c["tick_max_ms"] or 0.0, default=None),
    )
    return dataclasses.replace(ok[0], steps=tuple(steps), summary=summary)


def _pair(interval: Interval | None, digits: int) -> tuple[float, float] | None:
    """(low, high) rounded, the low end clamped at 0: every figure given an interval here
    (a rate, a latency, a CPU share, a ratio) is non-negative, though a t interval on few
    noisy rounds can reach below it."""
    if interval is None:
        return None
    rounded = interval.rounded(digits)
    return (max(0.0, rounded.low), rounded.high)


def _round_of(step: Step, position: int) -> int:
    """A round's index: its `figures.round`, else its position among the rounds."""
    return step.figures.round if step.figures.round is not None else position


def usable_rounds(rounds: Sequence[Step]) -> list[Step]:
    """The rounds that count: all but those harness.run.precision.round_exclusions keeps
    out (contended or stalled), unless fewer than two would be left (then all of them,
    and the summary's limit_note says so)."""
    excluded = {e.round for e in round_exclusions(rounds)}
    return [s for i, s in enumerate(rounds) if _round_of(s, i) not in excluded]


def with_rounds(
    case: Case, rounds: Sequence[tuple[int, Case]], precision_pct: float | None = None
) -> Case:
    """The case's figures from its confirmation rounds (`(round index, round case)`): the
    peak, p99, server CPU and CPU µs per request become the usable rounds' means with 95 %
    intervals (the load generator's CPU µs per request their mean); the
    ramp's peak stays as `ramp_peak`. A failed round is listed in `failed_repeats`, a round
    kept out in `rounds_excluded` with its reason. With `precision_pct` (`--precision`), a
    case whose peak's half-width is wider is `imprecise`, with the width it reached and
    where its noise comes from (harness.run.precision)."""
    if case.status != "ok" or not rounds:
        return case
    steps = tuple(
        dataclasses.replace(
            r.steps[0], figures=dataclasses.replace(r.steps[0].figures, round=index)
        )
        for index, r in rounds
        if r.status == "ok" and r.steps
    )
    failures = tuple(
        f"round {index + 1}: {r.error}" for index, r in rounds if r.status != "ok" or not r.steps
    )
    excluded = round_exclusions(steps)
    notes = [case.summary.limit_note, stall_note(steps), exclusion_note(steps), trial_note(steps)]
    summary = dataclasses.replace(
        case.summary,
        rounds=len(steps),
        rounds_contended=sum("contended" in s.flags for s in steps),
        failed_repeats=case.summary.failed_repeats + failures,
        rounds_excluded=tuple(e.to_dict() for e in excluded),
        precision_pct=precision_pct,
        limit_note="; ".join(n for n in dict.fromkeys(notes) if n) or None,
    )
    used = usable_rounds(steps)
    peak = mean_interval([s.achieved for s in used])
    if peak is not None:
        p99 = mean_interval([v for s in used if (v := s.latency_ms.get("p99")) is not None])
        cpu = mean_interval([v for s in used if (v := s.server_cpu_pct) is not None])
        per_req = mean_interval([v for s in used if (v := s.cpu_us_per_req) is not None])
        agent_per_req = [v for s in used if (v := s.agent_cpu_us_per_req) is not None]
        width = half_width_pct([s.achieved for s in used])
        lengths = [s.figures.round_s for s in steps if s.figures.round_s]
        summary = dataclasses.replace(
            summary,
            ramp_peak=case.summary.peak,
            peak=round(peak.value, 1),
            peak_offered=used[0].offered,  # where the rounds ran (`rounds_offered`)
            peak_ci=_pair(peak, 1),
            p99_at_peak_ms=round(p99.value, 3) if p99 else case.summary.p99_at_peak_ms,
            p99_at_peak_ci_ms=_pair(p99, 3),
            server_cpu_at_peak_pct=round(cpu.value, 1) if cpu else None,
            server_cpu_at_peak_ci_pct=_pair(cpu, 1),
            cpu_us_per_req=round(per_req.value, 1) if per_req else summary.cpu_us_per_req,
            cpu_us_per_req_ci=_pair(per_req, 1),
            agent_cpu_us_per_req=(
                round(statistics.fmean(agent_per_req), 1)
                if agent_per_req
                else summary.agent_cpu_us_per_req
            ),
            half_width_pct=round(width, 2) if width is not None else None,
            round_duration_s=max(lengths) if lengths else None,
            flags=tuple(sorted({*summary.flags, *(f for s in steps for f in s.flags)})),
        )
    if precision_pct is not None and not case_precise([s.achieved for s in used], precision_pct):
        source, note = noise_source(steps, used)
        summary = dataclasses.replace(
            summary,
            flags=tuple(sorted({*summary.flags, "imprecise"})),
            imprecise_reason=imprecise_reason(summary.half_width_pct, len(used), precision_pct),
            noise_source=source,
            noise_note=note,
        )
    return dataclasses.replace(case, rounds=steps, summary=summary)


def round_ratio(case: Case, other: Case) -> Interval | None:
    """`case` / `other` by paired rounds (round r against round r, which ran seconds
    apart); None unless at least two rounds pair up."""
    mine = {s.figures.round: s.achieved for s in usable_rounds(case.rounds)}
    theirs = {s.figures.round: s.achieved for s in usable_rounds(other.rounds)}
    both = sorted(set(mine) & set(theirs))
    return paired_ratio_interval([mine[i] for i in both], [theirs[i] for i in both])


def with_baseline_ratios(cases: Sequence[Case], roles: Mapping[str, str]) -> list[Case]:
    """Each case's role (from `roles`, framework by default), and its peak as a ratio to
    nginx's peak in the same run (the affinity study: on noisy machines the ratio to a
    baseline measured alongside is the figure that travels).

    nginx is matched on scenario, sink, driver, affinity mode, protocol and process model,
    falling back to nginx's case with the same scenario, mode and protocol under any
    process model (never across protocols: that ratio would hold the TLS tax). With
    rounds on both sides the ratio is taken round by round, with its interval.
    """
    nginx = [c for c in cases if c.framework == "nginx" and c.status == "ok"]

    def nginx_case(case: Case) -> Case | None:
        same = [
            c
            for c in nginx
            if (c.scenario, c.sink, c.driver, c.affinity.get("mode"), c.protocol)
            == (case.scenario, case.sink, case.driver, case.affinity.get("mode"), case.protocol)
        ]
        exact = [c for c in same if c.process_model == case.process_model]
        return (exact or same or [None])[0]

    result = []
    for case in cases:
        summary = dataclasses.replace(case.summary, role=roles.get(case.framework, "framework"))
        peak, baseline = summary.peak, nginx_case(case)
        if peak is not None and baseline and baseline.summary.peak and summary.peak_unit == "req/s":
            paired = round_ratio(case, baseline)
            summary = dataclasses.replace(
                summary,
                ratio_to_nginx=round(
                    paired.value if paired else float(peak) / float(baseline.summary.peak), 3
                ),
                ratio_to_nginx_ci=_pair(paired, 3),
            )
        cost, baseline_cost = (
            summary.cpu_us_per_req,
            (baseline.summary.cpu_us_per_req if baseline else None),
        )
        if cost is not None and baseline_cost:
            summary = dataclasses.replace(
                summary, cpu_ratio_to_nginx=round(cost / baseline_cost, 3)
            )
        result.append(dataclasses.replace(case, summary=summary))
    return result


def with_tls_tax(cases: Sequence[Case]) -> list[Case]:
    """Each h1-tls case's `tls_tax`: its peak as a ratio to the same server's h1 peak in
    the same run (the same scenario, sink, driver, process model and affinity mode), with
    its 95 % interval when both ran confirmation rounds (paired round by round, as the
    ratio to nginx is). Below 1.0: what TLS costs that server. Other cases unchanged."""
    plain = {
        (c.identity[:-1]): c
        for c in cases
        if c.protocol == PROTOCOL_H1 and c.status == "ok" and c.summary.peak
    }
    result = []
    for case in cases:
        h1 = plain.get(case.identity[:-1]) if case.protocol == PROTOCOL_H1_TLS else None
        peak = case.summary.peak
        if h1 is None or case.status != "ok" or peak is None or h1.summary.peak is None:
            result.append(case)
            continue
        paired = round_ratio(case, h1)
        tax = paired.value if paired else float(peak) / float(h1.summary.peak)
        summary = dataclasses.replace(
            case.summary, tls_tax=round(tax, 3), tls_tax_ci=_pair(paired, 3)
        )
        result.append(dataclasses.replace(case, summary=summary))
    return result

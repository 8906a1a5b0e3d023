"""Connection ramps (the WebSocket study): agent processes hold the connections across every step.

The agents follow one schedule (a connection target per step), so unlike HTTP steps the
load is not restarted between steps. Each second the runner reads the agents' lines and
the server's telemetry; a step is the agents' hold at its target, which they begin
together: each waits at the target (`ready`) until the runner saw them all there. The
breaking point is the first connection count at which, for 5 consecutive seconds, the
worst tick exceeds 1 s, connections fail, or the server drops them; in stress mode the
ramp ends there. In either mode it ends where the host runs short of memory
(memory_reserve_bytes), and that is its breaking point, named `memory`. Each hold
records the host's memory beside the server's and the agents' (`memory_breakdown`).

At the ramp's end the agents close every connection at once (`ConnectionRamp.close`:
orderly, or dropped by their processes' exit) and the runner follows that closing step
until the server has closed them all: `closing_record` is what it measured there, above
all the server's worst tick while it closed them (a close storm).
"""

from __future__ import annotations

import signal
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from drivers.agent.plan import (
    OPENING_SLOWDOWN_ALLOWED,
    AgentOutputs,
    agent_command,
    combine_agent_lines,
    per_process_limit,
    split_schedule,
)
from drivers.base import STOP_GRACE_S, DriverProcesses
from harness.monitor import Monitor, step_stats
from model.ramps import ConnectionRamp
from model.results import LATENCY_KEYS, Step
from model.scenarios import Scenario
from model.step_figures import CgroupCounters, StepFigures

if TYPE_CHECKING:
    from harness.topology import Topology

BREAK_TICK_MS = 1000.0
BREAK_SECONDS = 5
FAILURE_SHARE = 0.01  # of the attempts (or open connections) in the trailing window
MIN_FAILURES = 10
POLL_INTERVAL_S = 0.5
LIMIT_REASONS = ("too_many_open_files", "no_free_port")
LIMIT_NAMES = {"too_many_open_files": "open files", "no_free_port": "source ports"}
# Memory: a ramp ends (in either mode) once the host has less than this share of its
# memory available, at least MEMORY_RESERVE_MIN_BYTES: its breaking point is then the
# memory's, named with the figures, and the box never reaches the OOM killer.
MEMORY_RESERVE_SHARE = 0.05
MEMORY_RESERVE_MIN_BYTES = 1 << 30
# The closing step: the server must have closed every connection within CLOSING_TIMEOUT_S
# of the agents' closing, or CLOSING_S_PER_CONNECTION each if longer (else the record says
# how many it still held), and its telemetry is read CLOSING_SETTLE_S past the last close,
# since a stall's lag is reported by the first tick after it, which may fall in the next
# telemetry line. Node's 1,000,000 on this 2-core box still held some after 30 s (the 2
# cores closing both ends of every connection): 100 µs each follows them for 100 s.
CLOSING_TIMEOUT_S = 30.0
CLOSING_S_PER_CONNECTION = 100e-6
CLOSING_SETTLE_S = 1.5


@dataclass
class _Second:
    """One second of the ramp: agents combined, server telemetry merged."""

    t: float
    agents: dict[str, Any]
    tick_max_ms: float
    messages: int


@dataclass
class ConnectionRampResult:
    steps: list[Step] = field(default_factory=list)
    breaking_point: dict[str, Any] | None = None
    limits: dict[str, Any] = field(default_factory=dict)
    seconds: int = 0
    messages_sent: int = 0  # by every agent, over the whole ramp
    server_exit: int | None = None  # the server died during the ramp: its exit status
    lost: str | None = None  # a load host was lost during the ramp: which, and why
    # the agents outlived the ramp's deadline (ramp_deadline_s) and were told to stop: by
    # how much, from the ramp's planned end
    overran_s: float | None = None
    # the ramp ended before its last step's hold (the agents' own --time-limit, a lost
    # host, agents gone): where it stood then and why, as far as known
    cut_short: str | None = None
    closing: dict[str, Any] | None = None  # the closing step (closing_record); None: none
    # the host ran short of memory (memory_reserve_bytes) and the ramp ended there: the
    # connections open then and the bytes available
    memory_stop: dict[str, Any] | None = None

    @property
    def watchdog_note(self) -> str | None:
        """What the watchdogs did to the agents (overran, cut short), if anything."""
        overran = (
            f"the agents overran the ramp by {self.overran_s:g} s and were stopped"
            if self.overran_s is not None
            else None
        )
        return "; ".join(filter(None, (overran, self.cut_short))) or None


# The agents' watchdog: a ramp may open slower than planned (a slow server answers the
# handshakes late): the agents' own --time-limit allows their opening OPENING_SLOWDOWN_ALLOWED
# times its planned length; past that and RAMP_OVERRUN_MARGIN_S more they are sent SIGTERM
# (they close, print their final line and exit) and killed STOP_GRACE_S later.
RAMP_OVERRUN_MARGIN_S = 60.0


def memory_reserve_bytes(total_bytes: int, reserve_gib: float | None = None) -> int:
    """The memory a connection ramp leaves the host: `reserve_gib` when given (the ramp's
    `memory_reserve_gib`), else MEMORY_RESERVE_SHARE of it, at least
    MEMORY_RESERVE_MIN_BYTES."""
    if reserve_gib is not None:
        return int(reserve_gib * 2**30)
    return max(MEMORY_RESERVE_MIN_BYTES, int(total_bytes * MEMORY_RESERVE_SHARE))


def memory_break(open_now: int, available_bytes: int, reserve_bytes: int) -> dict[str, Any]:
    """The breaking point of a ramp that ran the host short of memory."""
    return {
        "connections": open_now,
        "reason": f"memory: {available_bytes / 2**30:.2f} GiB available, under the"
        f" {reserve_bytes / 2**30:.2f} GiB the ramp leaves the host",
        "limit": "memory",
        "host_available_bytes": available_bytes,
        "t": time.time(),
    }


def ramp_deadline_s(ramp: ConnectionRamp) -> float:
    """Seconds after which agents still running have overrun the ramp (after their own
    time limit, drivers.agent.plan.agent_command's)."""
    holds_s = ramp.hold_s * len(list(ramp))
    opening_s = ramp.planned_s - holds_s
    return opening_s * OPENING_SLOWDOWN_ALLOWED + holds_s + RAMP_OVERRUN_MARGIN_S


def _total(counts: dict[str, int]) -> int:
    return sum(counts.values())


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def find_breaking_point(seconds: list[_Second]) -> dict[str, Any] | None:
    """The first run of BREAK_SECONDS bad seconds: where and why the server broke
    (BreakWatch over `seconds`, in order)."""
    watch = BreakWatch()
    for second in seconds:
        found = watch.add(second)
        if found is not None:
            return found
    return None


class BreakWatch:
    """The breaking point, judged one second at a time as the ramp reads them: the work
    per second is bounded by the trailing window, whatever the ramp's length (judging the
    whole list afresh every poll cost the harness O(seconds²): 2 M steps a poll 25 minutes
    into a million-connection ramp).

    A second is bad when the worst tick exceeded 1 s, when handshakes were outstanding
    and none completed, or when failures (or server drops) over the trailing
    BREAK_SECONDS reached FAILURE_SHARE of the attempts (or open connections) — and at
    least MIN_FAILURES, so one stray failure never breaks a run. Failures come in bursts
    while a step opens; the trailing window keeps a step's hold from hiding them.
    """

    def __init__(self) -> None:
        self._recent: deque[_Second] = deque()  # the trailing window, and the second before
        self._streak: list[tuple[_Second, str]] = []
        self.found: dict[str, Any] | None = None

    def add(self, now: _Second) -> dict[str, Any] | None:
        """Judge the next second; the breaking point once found (then always that one)."""
        if self.found is not None:
            return self.found
        before = self._recent[-1] if self._recent else None
        self._recent.append(now)
        while len(self._recent) > 1 and self._recent[1].t < now.t - BREAK_SECONDS:
            self._recent.popleft()  # keep the window's first second at its start
        if before is None:
            return None
        window = next(s for s in self._recent if s.t >= now.t - BREAK_SECONDS)
        reason = _bad_second_reason(before, now, window)
        if not reason:
            self._streak = []
            return None
        self._streak.append((now, reason))
        if len(self._streak) >= BREAK_SECONDS:
            first, first_reason = self._streak[0]
            found = {"connections": first.agents["open"], "reason": first_reason, "t": first.t}
            limits = [LIMIT_NAMES[k] for k in LIMIT_REASONS if k in first_reason]
            self.found = {**found, "limit": limits[0]} if limits else found
        return self.found


def _bad_second_reason(before: _Second, now: _Second, window: _Second) -> str:
    """Why the second `now` is bad ("" when it is not); `window`: the trailing window's
    first second."""
    agents, past = now.agents, window.agents
    pending = agents["attempts"] - agents["opened"] - _total(agents["failed"])
    failed = _delta(agents["failed"], past["failed"])
    dropped = _delta(agents["closed_by_server"], past["closed_by_server"])
    attempts = agents["attempts"] - past["attempts"]
    if now.tick_max_ms > BREAK_TICK_MS:
        return f"tick max {now.tick_max_ms:.0f} ms > {BREAK_TICK_MS:.0f} ms"
    if pending > 0 and agents["opened"] == before.agents["opened"]:
        # handshakes under way and none completing: the server stopped accepting
        return f"handshakes stalled: {pending} pending, none completed"
    if _total(failed) >= max(MIN_FAILURES, FAILURE_SHARE * attempts):
        return "connections failed: " + ", ".join(f"{k} {v}" for k, v in failed.items())
    if _total(dropped) >= max(MIN_FAILURES, FAILURE_SHARE * agents["open"]):
        return "server dropped connections: " + ", ".join(f"{k} {v}" for k, v in dropped.items())
    return ""


class AgentGroup(Protocol):
    """The agent processes of one ramp, wherever they run: this machine's (`LocalAgents`)
    or a fleet's load hosts (harness.fleet.agents). The ramp reads them, never starts them."""

    limits: dict[str, Any]  # agent processes, sockets per process, source addresses

    @property
    def pids(self) -> list[int]:
        """Agent processes on this machine, for the monitor (none for remote hosts)."""
        ...

    def running(self) -> bool: ...

    def latest(self) -> dict[Any, dict[str, Any]]:
        """The newest report line of every agent process that reported so far."""
        ...

    def lost(self) -> str | None:
        """Why part of the load is gone (a load host lost); None while all is well."""
        ...

    def release(self, step: int) -> None:
        """Every agent is ready at `step`: tell them all to hold it now (--hold-together)."""
        ...

    def end(self) -> None:
        """Ask every agent to close its connections and stop (the stress mode's end)."""
        ...

    def finish(self) -> dict[Any, dict[str, Any]]:
        """Stop whatever still runs; every agent's final line."""
        ...


class LocalAgents:
    """Agent processes on this machine, each from its own 127.0.0.x addresses."""

    def __init__(
        self,
        commands: list[list[str]],
        raw_paths: list[Path],
        limits: dict[str, Any],
        load_cpus: str | None,
    ) -> None:
        """Start the agents `commands` (drivers.agent.plan.agent_command's), each writing
        its lines to its raw path; `limits` as the ramp records them."""
        self.limits = limits
        self._processes = DriverProcesses(commands, load_cpus, raw_paths)
        self._outputs = AgentOutputs(raw_paths)

    @classmethod
    def for_ramp(
        cls, ramp: ConnectionRamp, scenario: Scenario, server: Topology, load_cpus: str | None,
        raw_dir: Path, server_workers: int,
    ) -> LocalAgents:  # fmt: skip
        """The agents of `ramp`, as few processes as the open-file limit allows."""
        targets = [int(step.offered) for step in ramp]
        per_process = per_process_limit()
        shares = split_schedule(targets, per_process)
        commands = [
            agent_command(
                share,
                host=server.host,
                port=server.port,
                path=scenario.path,
                hold_s=ramp.hold_s,
                open_rate_per_s=ramp.open_rate_per_s,
                payload=scenario.payload,
                interval_s=scenario.message_interval_s,
                processes=len(shares),
                close=ramp.close,
            )
            for share in shares
        ]
        raw_dir.mkdir(parents=True, exist_ok=True)
        limits = {
            "agent_processes": len(shares),
            "connections_per_agent_process_max": per_process,
            "agent_sources": [source for share in shares for source in share.sources],
            "server_sockets_max": server_workers * per_process,
        }
        paths = [raw_dir / f"agent-{share.index}.txt" for share in shares]
        return cls(commands, paths, limits, load_cpus)

    @property
    def pids(self) -> list[int]:
        return self._processes.pids

    def running(self) -> bool:
        return self._processes.running()

    def latest(self) -> dict[Any, dict[str, Any]]:
        return dict(self._outputs.read())

    def lost(self) -> str | None:
        return None

    def release(self, step: int) -> None:
        self._processes.signal(signal.SIGUSR1)

    def end(self) -> None:
        self._processes.signal(signal.SIGTERM)

    def finish(self) -> dict[Any, dict[str, Any]]:
        self._processes.kill()
        return dict(self._outputs.read_final())


def run_connection_ramp(
    *,
    ramp: ConnectionRamp,
    agents: AgentGroup,
    server: Topology,
    monitor: Monitor,
    baseline_rss_bytes: int | None,
    on_step: Callable[[int, float], None],
    on_step_done: Callable[[Step], None],
) -> ConnectionRampResult:
    """Follow the started `agents` through the whole ramp; one Step per held target.

    Whatever ends the ramp (its end, the server's death, a lost load host, Ctrl-C), the
    agents are stopped before this returns.
    """
    targets = [int(step.offered) for step in ramp]
    result = ConnectionRampResult(limits=dict(agents.limits))
    seconds: list[_Second] = []
    watch = BreakWatch()
    current = -1
    window_start: _Second | None = None
    last_hold: _Second | None = None
    released = -1  # the last step every agent was told to hold (all were ready at it)

    def finish(start: _Second, end: _Second, until: float | None = None) -> None:
        result.steps.append(
            _finish_step(ramp, current, start, end, monitor, server, baseline_rss_bytes, until)
        )
        on_step_done(result.steps[-1])

    started = time.monotonic()
    deadline_s = ramp_deadline_s(ramp)
    told_to_stop: float | None = None
    closing_seen = False
    reserve_bytes = memory_reserve_bytes(psutil.virtual_memory().total, ramp.memory_reserve_gib)
    try:  # whatever happens from here (Ctrl-C included), no agent outlives the ramp
        monitor.set_agent_pids(agents.pids)
        while agents.running():
            time.sleep(POLL_INTERVAL_S)
            now = time.monotonic()
            if told_to_stop is None and now - started > deadline_s:
                told_to_stop = now
                result.overran_s = round(now - started - ramp.planned_s, 1)
                agents.end()  # the agents' stop signal: they close and print their totals
            elif told_to_stop is not None and now - told_to_stop > STOP_GRACE_S:
                break  # `finish` kills them
            if server.process.poll() is not None:  # a dead server ends the ramp at once
                result.server_exit = server.process.returncode
                break
            result.lost = agents.lost()
            if result.lost is not None:  # part of the load is gone: the ramp means nothing
                break
            latest = agents.latest()
            if len(latest) < result.limits["agent_processes"]:
                continue
            combined = combine_agent_lines(latest)
            available = psutil.virtual_memory().available
            if result.memory_stop is None and available < reserve_bytes and not closing_seen:
                result.memory_stop = {"connections": combined["open"], "available": available}
                if result.breaking_point is None:
                    result.breaking_point = memory_break(combined["open"], available, reserve_bytes)
                agents.end()  # in either mode: the host keeps its reserve
            if combined["phase"] == "ready" and combined["step"] > released:
                released = combined["step"]
                agents.release(released)  # every agent at the step's target: hold together
            if combined["closing"]:
                if not closing_seen and window_start is not None and last_hold is not None:
                    # the hold being read ends where the closing begins: the top step's
                    # window ended after the closing once, and twisted's 1,000,000 read a
                    # 10.9 s tick in a hold whose every second had read 2-8 ms. Its
                    # readings end at the first agent's closing_t, not when it was seen:
                    # the storm stalls the box, this loop too (node-express's 1,000,000
                    # was seen closing 5 s late, its hold's 2-12 ms ticks read 4,044 ms)
                    finish(window_start, last_hold, first_closing_t(latest))
                    window_start = None
                closing_seen = True  # the rest is the closing step's, not the ramp's
            telemetry = server.latest_telemetry()
            second = _Second(
                time.time(),
                combined,
                max((t["tick_max_ms"] for t in telemetry.values()), default=0.0),
                sum(t["messages"] for t in telemetry.values()),
            )
            if not closing_seen and (not seconds or second.t - seconds[-1].t >= 1.0):
                seconds.append(second)  # the breaking point is judged second by second
                if result.breaking_point is None:
                    result.breaking_point = watch.add(second)
                    if result.breaking_point and ramp.mode == "stress":
                        agents.end()  # the ramp ends at the breaking point
            if combined["phase"] == "holding":
                if window_start is None or combined["step"] != current:
                    if window_start is not None and last_hold is not None:
                        finish(window_start, last_hold)
                    current, window_start = combined["step"], second
                    on_step(current, targets[current])
                    monitor.begin_step(current)
                last_hold = second
            elif window_start is not None and last_hold is not None:
                finish(window_start, last_hold)  # the hold ended: opening the next step
                window_start = None
        if window_start is not None and last_hold is not None and result.lost is None:
            finish(window_start, last_hold)
        # the agents ended and closed their connections (not a dead server, a lost host,
        # or agents that outlived the watchdog's grace): their closing step
        # (a server without telemetry, one run as a command, says nothing of it: not
        # followed, rather than waited on for CLOSING_TIMEOUT_S)
        if (
            result.lost is None
            and result.server_exit is None
            and seconds
            and not agents.running()
            and server.telemetry_lines()
        ):
            result.closing = follow_closing(ramp, agents, server)
    finally:
        final = agents.finish()
    result.seconds = len(seconds)
    ended = combine_agent_lines(final) if final else None
    if ended is not None:  # the agents' final lines: every message they sent, what ended them
        result.messages_sent = ended["messages_sent"]
    elapsed_s = time.monotonic() - started
    if ended is not None and "time-limit" in ended["stopped_by"]:
        result.cut_short = (
            f"the agents stopped at their time limit after {elapsed_s:.0f} s:"
            f" {ended['opened']:,} of {targets[-1]:,} opened, {len(result.steps)} of"
            f" {len(targets)} steps held (planned at {ramp.open_rate_per_s:g}/s)"
        )
    elif (
        len(result.steps) < len(targets)
        and result.overran_s is None
        and not (result.breaking_point and ramp.mode == "stress")  # a stress ramp's own end
        and result.memory_stop is None  # the host's memory: the breaking point says it
    ):
        # whatever else ended the ramp early (a lost host, a dead server, agents gone): said
        why = result.lost or (
            f"the server exited {result.server_exit}" if result.server_exit is not None else None
        )
        stopped = ", ".join(ended["stopped_by"]) if ended is not None else "no final line"
        result.cut_short = (
            f"the ramp ended after {elapsed_s:.0f} s with {len(result.steps)} of {len(targets)}"
            f" steps held (agents stopped by: {stopped or 'nothing said'})"
            + (f"; {why}" if why else "")
        )
    return result


def first_closing_t(lines: dict[Any, dict[str, Any]]) -> float | None:
    """When the first agent began closing (its own `closing_t`); None before any did."""
    return min(
        (line["closing_t"] for line in lines.values() if line.get("closing_t")), default=None
    )


def follow_closing(ramp: ConnectionRamp, agents: AgentGroup, server: Topology) -> dict[str, Any]:
    """Follow the closing step the agents began: until the server holds no connection
    (at most closing_timeout_s) and CLOSING_SETTLE_S more; what it measured
    (`closing_record`)."""
    started = time.time()
    held = sum(int(line["open"]) for line in server.latest_telemetry().values())
    timeout_s = closing_timeout_s(held)
    # from the agents' own closing lines; an agent stopped by a signal before it could
    # print one (the watchdog) leaves the time the runner saw it
    closing_t = first_closing_t(agents.latest())
    if closing_t is None:
        closing_t = started
    closed_t: float | None = None
    while time.time() < closing_t + timeout_s:
        if server.process.poll() is not None:
            break
        latest = server.latest_telemetry()
        newest_t = min((line["t"] for line in latest.values()), default=0.0)
        if (
            closed_t is None
            and newest_t > closing_t
            and not any(line["open"] for line in latest.values())
        ):
            closed_t = newest_t
        if closed_t is not None and newest_t >= closed_t + CLOSING_SETTLE_S:
            break
        time.sleep(POLL_INTERVAL_S / 2)
    return closing_record(
        server.telemetry_lines(), close=ramp.close, closing_t=closing_t, end_t=time.time()
    )


def closing_timeout_s(connections: int) -> float:
    """How long a closing step of `connections` is followed at most."""
    return max(CLOSING_TIMEOUT_S, connections * CLOSING_S_PER_CONNECTION)


def closing_record(
    telemetry: list[dict[str, Any]],
    *,
    close: str,
    closing_t: float,
    end_t: float,
) -> dict[str, Any]:
    """What the server's telemetry says of a closing step that began at `closing_t` (the
    agents' clock, this machine's or a load host's) and was followed until `end_t`.

    `connections`: the server's open connections at the closing (its last line before);
    `open_after`: those it still held at `end_t`; `close_s`: from the closing to the
    first line in which no worker held any (None: not within the step); `tick_max_ms` and
    `tick_avg_ms`: its worst and mean tick lag in the lines after the closing (the first
    of them covers up to a second before it: a quiet hold); `gc_collections` and
    `gc_pause_ms`: what its collector did in the step (the counters' gain); `followed_s`:
    how long the step was followed."""
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for line in sorted(telemetry, key=lambda line: line["t"]):
        by_pid.setdefault(int(line.get("pid", 0)), []).append(line)
    connections = open_after = gc_collections = 0
    gc_pause_ms = 0.0
    inside: list[dict[str, Any]] = []
    for lines in by_pid.values():
        before = [line for line in lines if line["t"] <= closing_t]
        after = [line for line in lines if closing_t < line["t"] <= end_t]
        inside.extend(after)
        if before:
            connections += int(before[-1]["open"])
        last = after[-1] if after else (before[-1] if before else None)
        if last is not None:
            open_after += int(last["open"])
        if before and after:
            gc_collections += int(after[-1]["gc_collections"]) - int(before[-1]["gc_collections"])
            gc_pause_ms += float(after[-1]["gc_pause_ms"]) - float(before[-1]["gc_pause_ms"])
    close_s = None
    for t in sorted({line["t"] for line in inside}):
        newest = [
            [line for line in lines if closing_t < line["t"] <= t][-1:] for lines in by_pid.values()
        ]
        if all(newest) and not any(line[0]["open"] for line in newest):
            close_s = round(t - closing_t, 3)
            break
    return {
        "close": close,
        "connections": connections,
        "open_after": open_after,
        "close_s": close_s,
        "tick_max_ms": max((float(line["tick_max_ms"]) for line in inside), default=None),
        "tick_avg_ms": round(statistics.fmean(float(line["tick_avg_ms"]) for line in inside), 3)
        if inside
        else None,
        "gc_collections": gc_collections,
        "gc_pause_ms": round(gc_pause_ms, 3),
        "followed_s": round(end_t - closing_t, 3),
    }


def _finish_step(
    ramp: ConnectionRamp,
    index: int,
    start: _Second,
    end: _Second,
    monitor: Monitor,
    server: Topology,
    baseline_rss_bytes: int | None,
    until: float | None = None,
) -> Step:
    """A held target as a Step: connections held, failures, messages, memory per connection;
    `until`: when the agents began closing, if they had (monitor.step_stats)."""
    window = monitor.end_step() if monitor.windows and monitor.windows[-1].ended is None else None
    stats = (
        step_stats(monitor.rows, server.telemetry_lines(), window, until)
        if window
        else {
            "server_cpu_pct": None,
            "agent_cpu_pct": None,
            "rss_max_bytes": None,
            "tick_ms": {"avg": None, "max": None},
        }
    )
    agents_start, agents_end = start.agents, end.agents
    span_s = max(1e-6, end.t - start.t)
    failed = _delta(agents_end["failed"], {})
    dropped = _delta(agents_end["closed_by_server"], {})
    errors_in_step = (
        _total(agents_end["failed"])
        - _total(agents_start["failed"])
        + _total(agents_end["closed_by_server"])
        - _total(agents_start["closed_by_server"])
    )
    target = list(ramp)[index].offered
    open_now = agents_end["open"]
    attempts = max(1, agents_end["attempts"])
    errors_total = _total(failed) + _total(dropped)
    flags = []
    if any(reason in failed for reason in LIMIT_REASONS):
        flags.append("limit_capped")
    rss = stats["rss_max_bytes"]
    # the server's cgroup at the hold's end: every process, sockets' buffers included
    # where the controller counts them (summary.cgroup.socket_memory); read by the monitor
    # while every agent still held, not at the window's end (for the top step that comes
    # after the agents began closing, and read ~20 % low at 15,000 connections)
    cgroup_bytes = held_cgroup_bytes(monitor.rows, start.t, end.agents.get("t", end.t))
    if cgroup_bytes is None:
        cgroup_bytes = (stats.get("cgroup") or {}).get("memory_bytes")
    held_t = end.agents.get("t", end.t)
    host_readings = {
        name: value
        for name, key in HOST_READINGS.items()
        if (value := held_reading(monitor.rows, key, start.t, held_t)) is not None
    }
    return Step(
        offered=target,
        unit="conns",
        achieved=float(open_now),
        replies=agents_end["opened"],
        errors={
            "total": errors_total,
            **{f"failed_{k}": v for k, v in failed.items()},
            **{f"closed_{k}": v for k, v in dropped.items()},
        },
        error_rate=min(1.0, errors_total / attempts),
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=rss,
        tick_ms=stats["tick_ms"],
        flags=tuple(flags),
        figures=StepFigures(
            open=open_now,
            errors_in_step=errors_in_step,
            messages_out_per_s=round(
                (agents_end["messages_sent"] - agents_start["messages_sent"]) / span_s, 1
            ),
            messages_in_per_s=round((end.messages - start.messages) / span_s, 1),
            # what the connections added to the idle server, per connection
            rss_per_connection_bytes=round((rss - (baseline_rss_bytes or 0)) / open_now)
            if rss and open_now
            else None,
            cgroup_memory_bytes=cgroup_bytes,
            **host_readings,
            cgroup=CgroupCounters(**stats["cgroup"]) if stats.get("cgroup") else None,
            agent_rss_bytes=agents_end["rss_bytes"],
            hold_s=round(span_s, 1),
            hosts=agents_end.get("hosts"),
        ),
    )


def held_reading(rows: list[dict[str, Any]], key: str, start_t: float, held_t: float) -> int | None:
    """The monitor's `key` in its last row in (`start_t`, `held_t`]: a hold from its start
    to `held_t`, the time every agent was last seen holding (none began closing before
    it); None when no such row read it."""
    held = [row[key] for row in rows if start_t < row["t"] <= held_t and row.get(key) is not None]
    return int(held[-1]) if held else None


def held_cgroup_bytes(rows: list[dict[str, Any]], start_t: float, held_t: float) -> int | None:
    """The server cgroup's memory at a hold's end (held_reading)."""
    return held_reading(rows, "server_cgroup_memory_bytes", start_t, held_t)


# The host's memory at each hold's end, read by the monitor (harness.monitor.sample): what
# the whole box had left, the kernel's slab (every socket's own objects, both ends here),
# TCP's buffers and conntrack's entries in the server's namespace.
HOST_READINGS = {
    "host_available_bytes": "mem_available_bytes",
    "kernel_slab_bytes": "kernel_slab_bytes",
    "tcp_buffer_bytes": "tcp_buffer_bytes",
    "conntrack_count": "conntrack_count",
}


def _slope_kb(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return round(statistics.linear_regression(xs, ys).slope / 1024, 2)


def memory_breakdown(steps: list[Step], idle: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where the memory went at the top held step — the server (RSS, and its cgroup:
    sockets' buffers and kernel objects where counted), the agents, the kernel's slab
    and the whole host — each also as KB per connection (the slope over the held steps,
    from the idle reading `idle`, a monitor row before any connection). None without a
    held step."""
    held = [s for s in steps if s.figures.open]
    if not held:
        return None
    top = held[-1]
    idle = idle or {}

    def series(read: Callable[[Step], float | None], idle_value: float | None) -> float | None:
        points = [(0.0, float(idle_value))] if idle_value is not None else []
        points += [(float(s.figures.open), float(v)) for s in held if (v := read(s)) is not None]
        return _slope_kb(points)

    available_idle = idle.get("mem_available_bytes")
    slab_idle = idle.get("kernel_slab_bytes")
    top_available = top.figures.host_available_bytes
    top_slab = top.figures.kernel_slab_bytes
    return {
        "connections": top.figures.open,
        "server_rss_bytes": top.rss_max_bytes,
        "server_cgroup_bytes": top.figures.cgroup_memory_bytes,
        "agents_rss_bytes": top.figures.agent_rss_bytes,
        "kernel_slab_bytes": top_slab,
        "kernel_slab_growth_bytes": top_slab - slab_idle
        if top_slab is not None and slab_idle is not None
        else None,
        "tcp_buffer_bytes": top.figures.tcp_buffer_bytes,
        "host_available_bytes": top_available,
        "host_used_growth_bytes": available_idle - top_available
        if top_available is not None and available_idle is not None
        else None,
        "conntrack_count": top.figures.conntrack_count,
        "kb_per_connection": {
            "server_rss": series(lambda s: s.rss_max_bytes, idle.get("server_rss_bytes")),
            "server_cgroup": series(
                lambda s: s.figures.cgroup_memory_bytes,
                idle.get("server_cgroup_memory_bytes"),
            ),
            "agents_rss": series(lambda s: s.figures.agent_rss_bytes, None),
            "kernel_slab": series(lambda s: s.figures.kernel_slab_bytes, slab_idle),
            # the whole box: what it had available, fallen per connection
            "host": series(
                lambda s: (
                    -s.figures.host_available_bytes
                    if s.figures.host_available_bytes is not None
                    else None
                ),
                -available_idle if available_idle is not None else None,
            ),
        },
    }


def cgroup_kb_per_connection(steps: list[Step], baseline_bytes: int | None) -> float | None:
    """KB of the server's cgroup memory per open connection: the slope of
    `figures.cgroup_memory_bytes` over the held steps (from the idle group's, when read);
    None with fewer than two points (no cgroup)."""
    points = [
        (s.figures.open, s.figures.cgroup_memory_bytes)
        for s in steps
        if s.figures.cgroup_memory_bytes is not None and s.figures.open
    ]
    if baseline_bytes is not None and points:
        points.insert(0, (0, baseline_bytes))
    if len(points) < 2 or len({x for x, _ in points}) < 2:
        return None
    slope = statistics.linear_regression([p[0] for p in points], [p[1] for p in points]).slope
    return round(slope / 1024, 2)


def memory_per_connection(steps: list[Step], baseline_rss_bytes: int | None) -> float | None:
    """Bytes of server RSS per open connection: the slope over the held steps (the WebSocket
    study found 10.3 KB)."""
    points = [
        (s.figures.open, s.rss_max_bytes) for s in steps if s.rss_max_bytes and s.figures.open
    ]
    if baseline_rss_bytes:
        points.insert(0, (0, baseline_rss_bytes))
    if len(points) < 2:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    slope = statistics.linear_regression(xs, ys).slope
    return round(slope, 1)

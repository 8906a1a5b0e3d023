"""The connection ramp's I/O loop: poll the agents, the server and the host's memory,
feed each poll to the ramp's state machine (harness.connections.machine) and carry out
what it says; then follow the closing step and say how the ramp ended.

Whatever ends the ramp (its end, the server's death, a lost load host, Ctrl-C), the
agents are stopped before `run_connection_ramp` returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

from drivers.agent.plan import combine_agent_lines
from harness.connections.breaking import RampSecond, memory_reserve_bytes
from harness.connections.closing import first_closing_t, follow_closing
from harness.connections.machine import (
    BeginStep,
    EndAgents,
    FinishStep,
    RampMachine,
    RampSample,
    RampState,
    ReleaseStep,
    Transition,
)
from harness.connections.readings import hold_step
from harness.monitor import Monitor
from model.ramps import ConnectionRamp
from model.results import Step

if TYPE_CHECKING:
    from harness.connections.agents import AgentGroup
    from harness.topology import Topology

POLL_INTERVAL_S = 0.5


@dataclass
class ConnectionRampResult:
    """What a connection ramp held, where it broke, and how it ended."""

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


def poll_ramp(agents: AgentGroup, server: Topology, elapsed_s: float) -> RampSample:
    """What the ramp looks like now: the server's death, a lost load host, or (once every
    agent process reported) the agents' lines combined, the server's telemetry and the
    host's available memory."""
    if server.process.poll() is not None:
        return RampSample(elapsed_s, server_exit=server.process.returncode)
    lost = agents.lost()
    if lost is not None:
        return RampSample(elapsed_s, lost=lost)
    latest = agents.latest()
    if len(latest) < agents.limits["agent_processes"]:
        return RampSample(elapsed_s)
    available_bytes = psutil.virtual_memory().available
    telemetry = server.latest_telemetry()
    second = RampSecond(
        time.time(),
        combine_agent_lines(latest),
        max((line["tick_max_ms"] for line in telemetry.values()), default=0.0),
        sum(line["messages"] for line in telemetry.values()),
    )
    return RampSample(
        elapsed_s,
        second=second,
        available_bytes=available_bytes,
        closing_t=first_closing_t(latest),
    )


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
    """Follow the started `agents` through the whole ramp; one Step per held target
    (`on_step` when a hold begins, `on_step_done` with its Step when it ends)."""
    reserve_bytes = memory_reserve_bytes(psutil.virtual_memory().total, ramp.memory_reserve_gib)
    machine = RampMachine.for_ramp(ramp, reserve_bytes)
    targets = list(ramp)
    result = ConnectionRampResult(limits=dict(agents.limits))

    def carry_out(transition: Transition) -> None:
        for action in transition.actions:
            if isinstance(action, EndAgents):
                agents.end()  # they close and print their totals
            elif isinstance(action, ReleaseStep):
                agents.release(action.step)
            elif isinstance(action, BeginStep):
                on_step(action.index, action.target)
                monitor.begin_step(action.index)
            elif isinstance(action, FinishStep):
                step = hold_step(
                    targets[action.index].offered, action.start, action.end, monitor=monitor,
                    server=server, baseline_rss_bytes=baseline_rss_bytes, until=action.until,
                )  # fmt: skip
                result.steps.append(step)
                on_step_done(step)

    started = time.monotonic()
    try:  # whatever happens from here (Ctrl-C included), no agent outlives the ramp
        monitor.set_agent_pids(agents.pids)
        while agents.running() and machine.state is not RampState.DONE:
            time.sleep(POLL_INTERVAL_S)
            carry_out(machine.feed(poll_ramp(agents, server, time.monotonic() - started)))
        carry_out(machine.agents_exited())
        # the agents ended and closed their connections: their closing step (a server
        # without telemetry, one run as a command, says nothing of it: not followed)
        if machine.closing_follows and not agents.running() and server.telemetry_lines():
            result.closing = follow_closing(ramp, agents, server)
    finally:
        final = agents.finish()
    _take_findings(result, machine)
    ended = combine_agent_lines(final) if final else None
    if ended is not None:  # the agents' final lines: every message they sent
        result.messages_sent = ended["messages_sent"]
    result.cut_short = cut_short_note(
        result, ramp, ended, elapsed_s=time.monotonic() - started, stress=machine.stress
    )
    return result


def _take_findings(result: ConnectionRampResult, machine: RampMachine) -> None:
    """What the state machine found, onto the ramp's result."""
    result.breaking_point = machine.breaking_point
    result.memory_stop = machine.memory_stop
    result.overran_s = machine.overran_s
    result.server_exit = machine.server_exit
    result.lost = machine.lost
    result.seconds = machine.seconds_judged


def cut_short_note(
    result: ConnectionRampResult,
    ramp: ConnectionRamp,
    ended: dict[str, Any] | None,
    *,
    elapsed_s: float,
    stress: bool,
) -> str | None:
    """Why the ramp ended before its last step's hold, when nothing else says so: the
    agents' own time limit, or whatever else ended it early (a lost host, a dead
    server, agents gone). None when it held every step, or when the watchdog (overran),
    a stress ramp's breaking point or the host's memory ended it (they say so)."""
    targets = [int(step.offered) for step in ramp]
    held = f"{len(result.steps)} of {len(targets)} steps held"
    if ended is not None and "time-limit" in ended["stopped_by"]:
        return (
            f"the agents stopped at their time limit after {elapsed_s:.0f} s:"
            f" {ended['opened']:,} of {targets[-1]:,} opened, {held}"
            f" (planned at {ramp.open_rate_per_s:g}/s)"
        )
    if (
        len(result.steps) >= len(targets)
        or result.overran_s is not None
        or (result.breaking_point and stress)
        or result.memory_stop is not None
    ):
        return None
    why = result.lost or (
        f"the server exited {result.server_exit}" if result.server_exit is not None else None
    )
    stopped = ", ".join(ended["stopped_by"]) if ended is not None else "no final line"
    return (
        f"the ramp ended after {elapsed_s:.0f} s with {held}"
        f" (agents stopped by: {stopped or 'nothing said'})" + (f"; {why}" if why else "")
    )

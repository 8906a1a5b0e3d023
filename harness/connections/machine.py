"""The connection ramp as a state machine: fed what each poll of the runner saw, it says
where the ramp stands and what the runner does next. Pure: no process, clock or socket,
so every transition is tested on hand-made samples (harness.connections.run is the I/O
loop around it).

States (`RampState`):

- OPENING: the agents open connections toward the next step's target (or wait, `ready`,
  at it); no step is being read. A ramp starts here.
- HOLDING: every agent holds the same step: that step's window is open, from the first
  second seen holding to the last.
- CLOSING: an agent began closing (the ramp's end, or the agents told to end): the hold
  being read ends where the closing began, and the seconds after are the closing step's,
  not judged for the breaking point.
- DONE: the loop ends: the server died, a load host was lost, the agents outlived the
  watchdog's grace, or the agents exited (`agents_exited`).

Besides the state, each poll may tell the agents to end (`EndAgents`): when they overran
the ramp's deadline, when the host's memory fell under its reserve, and in stress mode at
the breaking point. The agents then close, which the next polls see as CLOSING.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from drivers.agent.plan import OPENING_SLOWDOWN_ALLOWED
from drivers.base import STOP_GRACE_S
from harness.connections.breaking import BreakWatch, RampSecond, memory_break
from model.ramps import ConnectionRamp

# The agents' watchdog: a ramp may open slower than planned (a slow server answers the
# handshakes late): the agents' own --time-limit allows their opening OPENING_SLOWDOWN_ALLOWED
# times its planned length; past that and RAMP_OVERRUN_MARGIN_S more they are told to end
# (they close, print their final line and exit) and killed STOP_GRACE_S later.
RAMP_OVERRUN_MARGIN_S = 60.0
JUDGED_EVERY_S = 1.0  # the breaking point is judged on seconds at least this far apart


def ramp_deadline_s(ramp: ConnectionRamp) -> float:
    """Seconds after which agents still running have overrun the ramp (after their own
    time limit, drivers.agent.plan.agent_command's)."""
    holds_s = ramp.hold_s * len(list(ramp))
    opening_s = ramp.planned_s - holds_s
    return opening_s * OPENING_SLOWDOWN_ALLOWED + holds_s + RAMP_OVERRUN_MARGIN_S


class RampState(Enum):
    """Where the ramp stands (module docstring)."""

    OPENING = "opening"
    HOLDING = "holding"
    CLOSING = "closing"
    DONE = "done"


@dataclass(frozen=True)
class RampSample:
    """What one poll of the runner saw."""

    elapsed_s: float  # since the ramp began, on a monotonic clock
    server_exit: int | None = None  # the server died: its exit status
    lost: str | None = None  # part of the load is gone (a load host lost): why
    second: RampSecond | None = None  # None until every agent process has reported
    available_bytes: int | None = None  # the host's MemAvailable
    closing_t: float | None = None  # when the first agent began closing, on its clock


@dataclass(frozen=True)
class EndAgents:
    """Tell every agent to close its connections and stop."""

    why: str  # overran, memory, breaking point


@dataclass(frozen=True)
class ReleaseStep:
    """Every agent is ready at `step`: tell them all to hold it now."""

    step: int


@dataclass(frozen=True)
class BeginStep:
    """A hold began: step `index`, `target` connections."""

    index: int
    target: int


@dataclass(frozen=True)
class FinishStep:
    """A hold ended: read step `index` from `start` to `end` (`until`: when the agents
    began closing, if they had)."""

    index: int
    start: RampSecond
    end: RampSecond
    until: float | None = None


Action = EndAgents | ReleaseStep | BeginStep | FinishStep


@dataclass(frozen=True)
class Transition:
    """The state after a sample, and what the runner does now, in order."""

    state: RampState
    actions: tuple[Action, ...] = ()


class RampMachine:
    """One connection ramp, followed poll by poll (module docstring). What it found is
    kept on it for the ramp's result: `breaking_point`, `memory_stop`, `overran_s`,
    `server_exit`, `lost` and `seconds_judged`."""

    def __init__(
        self,
        targets: list[int],
        *,
        stress: bool,
        deadline_s: float,
        planned_s: float,
        reserve_bytes: int,
        stop_grace_s: float = STOP_GRACE_S,
    ) -> None:
        """A ramp through `targets` (one per step); `stress`: it ends at its breaking
        point; the agents overrun past `deadline_s` (`planned_s` is the ramp's plan) and
        are given `stop_grace_s` to stop; the host keeps `reserve_bytes` of memory."""
        self.targets = targets
        self.stress = stress
        self.deadline_s = deadline_s
        self.planned_s = planned_s
        self.reserve_bytes = reserve_bytes
        self.stop_grace_s = stop_grace_s
        self.state = RampState.OPENING
        self.breaking_point: dict[str, Any] | None = None
        self.memory_stop: dict[str, Any] | None = None
        self.overran_s: float | None = None
        self.server_exit: int | None = None
        self.lost: str | None = None
        self.seconds_judged = 0
        self._watch = BreakWatch()
        self._last_judged_t: float | None = None
        self._told_to_end_s: float | None = None  # when the watchdog told the agents to end
        self._released = -1  # the last step every agent was told to hold
        self._step = -1  # the step held, or last held
        self._hold: tuple[RampSecond, RampSecond] | None = None  # its first and last second

    @classmethod
    def for_ramp(cls, ramp: ConnectionRamp, reserve_bytes: int) -> RampMachine:
        """The machine of `ramp`, leaving the host `reserve_bytes` of memory."""
        return cls(
            [int(step.offered) for step in ramp],
            stress=ramp.mode == "stress",
            deadline_s=ramp_deadline_s(ramp),
            planned_s=ramp.planned_s,
            reserve_bytes=reserve_bytes,
        )

    @property
    def closing_follows(self) -> bool:
        """Whether the agents' closing step is the server's to follow: the ramp ran (a
        second was read) and neither the server died nor a load host was lost."""
        return self.lost is None and self.server_exit is None and self.seconds_judged > 0

    def feed(self, sample: RampSample) -> Transition:
        """The next state from one poll's `sample`, and what the runner does now."""
        if self.state is RampState.DONE:
            return Transition(self.state)
        actions: list[Action] = []
        if self._past_grace(sample.elapsed_s, actions) or self._load_gone(sample):
            self.state = RampState.DONE
            return Transition(self.state, tuple(actions))
        second = sample.second
        if second is not None:
            self._watch_memory(second, sample.available_bytes, actions)
            self._release_ready(second.agents, actions)
            self._see_closing(second.agents, sample.closing_t, actions)
            self._judge(second, actions)
            self._follow_holds(second, actions)
        return Transition(self.state, tuple(actions))

    def agents_exited(self) -> Transition:
        """The loop is over: the hold being read ends at its last second seen, unless a
        load host was lost (a lost host's last seconds are not guessed)."""
        actions: tuple[Action, ...] = ()
        if self._hold is not None and self.lost is None:
            actions = (FinishStep(self._step, *self._hold),)
        self._hold = None
        self.state = RampState.DONE
        return Transition(self.state, actions)

    def _past_grace(self, elapsed_s: float, actions: list[Action]) -> bool:
        """The watchdog: past the deadline the agents are told to end; True once they
        outlived the grace given them (the runner then kills them)."""
        if self._told_to_end_s is not None:
            return elapsed_s - self._told_to_end_s > self.stop_grace_s
        if elapsed_s > self.deadline_s:
            self._told_to_end_s = elapsed_s
            self.overran_s = round(elapsed_s - self.planned_s, 1)
            actions.append(EndAgents("overran"))
        return False

    def _load_gone(self, sample: RampSample) -> bool:
        """True when the server died or a load host was lost: the ramp means nothing more."""
        if sample.server_exit is not None:
            self.server_exit = sample.server_exit
            return True
        self.lost = sample.lost
        return sample.lost is not None

    def _watch_memory(
        self, second: RampSecond, available_bytes: int | None, actions: list[Action]
    ) -> None:
        """Under the host's memory reserve the ramp ends, in either mode, and that is its
        breaking point unless one was found before; the closing step may dip into it."""
        if self.memory_stop is not None or self.state is RampState.CLOSING:
            return
        if available_bytes is None or available_bytes >= self.reserve_bytes:
            return
        open_now = second.agents["open"]
        self.memory_stop = {"connections": open_now, "available": available_bytes}
        if self.breaking_point is None:
            self.breaking_point = memory_break(
                open_now, available_bytes, self.reserve_bytes, second.t
            )
        actions.append(EndAgents("memory"))

    def _release_ready(self, agents: dict[str, Any], actions: list[Action]) -> None:
        """Every agent ready at a step not yet released: they hold it together."""
        if agents["phase"] == "ready" and agents["step"] > self._released:
            self._released = agents["step"]
            actions.append(ReleaseStep(self._released))

    def _see_closing(
        self, agents: dict[str, Any], closing_t: float | None, actions: list[Action]
    ) -> None:
        """The first agent closing ends the hold being read where the closing began (its
        own `closing_t`, not when the runner saw it: the closing stalls the whole box, this
        loop too, and its first seconds would count as the hold's)."""
        if not agents["closing"] or self.state is RampState.CLOSING:
            return
        if self._hold is not None:
            actions.append(FinishStep(self._step, *self._hold, until=closing_t))
            self._hold = None
        self.state = RampState.CLOSING

    def _judge(self, second: RampSecond, actions: list[Action]) -> None:
        """Seconds at least JUDGED_EVERY_S apart, before the closing, are judged for the
        breaking point; in stress mode the ramp ends there."""
        if self.state is RampState.CLOSING:
            return
        if self._last_judged_t is not None and second.t - self._last_judged_t < JUDGED_EVERY_S:
            return
        self._last_judged_t = second.t
        self.seconds_judged += 1
        if self.breaking_point is not None:
            return
        self.breaking_point = self._watch.add(second)
        if self.breaking_point is not None and self.stress:
            actions.append(EndAgents("breaking point"))

    def _follow_holds(self, second: RampSecond, actions: list[Action]) -> None:
        """A step's hold runs from the first second every agent holds it to the last;
        it ends when the agents hold another step or open the next. (Closing agents
        never report holding: once CLOSING, no hold begins.)"""
        if self.state is RampState.CLOSING:
            return
        agents = second.agents
        if agents["phase"] != "holding":
            if self._hold is not None:
                actions.append(FinishStep(self._step, *self._hold))
                self._hold = None
            self.state = RampState.OPENING
            return
        if self._hold is None or agents["step"] != self._step:
            if self._hold is not None:
                actions.append(FinishStep(self._step, *self._hold))
            self._step = agents["step"]
            self._hold = (second, second)
            actions.append(BeginStep(self._step, self.targets[self._step]))
        else:
            self._hold = (self._hold[0], second)
        self.state = RampState.HOLDING

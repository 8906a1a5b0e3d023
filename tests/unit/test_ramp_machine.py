"""The connection ramp's state machine (harness.connections.machine), one transition at a
time, on hand-made samples: no agent, server or clock."""

from __future__ import annotations

from typing import Any

import pytest

from harness.connections.breaking import RampSecond
from harness.connections.machine import (
    RAMP_OVERRUN_MARGIN_S,
    BeginStep,
    EndAgents,
    FinishStep,
    RampMachine,
    RampSample,
    RampState,
    ReleaseStep,
    ramp_deadline_s,
)
from harness.connections.run import ConnectionRampResult, cut_short_note
from model.ramps import ConnectionRamp

TARGETS = [100, 200, 300]
RESERVE_BYTES = 1_000
PLENTY_BYTES = 10**9


def machine(stress: bool = False) -> RampMachine:
    return RampMachine(
        TARGETS,
        stress=stress,
        deadline_s=100.0,
        planned_s=40.0,
        reserve_bytes=RESERVE_BYTES,
        stop_grace_s=5.0,
    )


def second(
    t: float,
    phase: str,
    step: int,
    open_: int = 100,
    *,
    tick_ms: float = 5.0,
    closing: bool = False,
) -> RampSecond:
    agents: dict[str, Any] = {
        "open": open_,
        "opened": open_,
        "attempts": open_,
        "failed": {},
        "closed_by_server": {},
        "phase": phase,
        "step": step,
        "closing": closing,
    }
    return RampSecond(t, agents, tick_ms, 0)


def seen(
    now: RampSecond,
    elapsed_s: float = 10.0,
    available_bytes: int = PLENTY_BYTES,
    closing_t: float | None = None,
) -> RampSample:
    return RampSample(elapsed_s, second=now, available_bytes=available_bytes, closing_t=closing_t)


def test_a_ramp_starts_opening_and_waits_for_every_agent() -> None:
    ramp = machine()
    assert ramp.state is RampState.OPENING
    transition = ramp.feed(RampSample(1.0))  # not every agent has reported yet
    assert transition.state is RampState.OPENING and transition.actions == ()
    assert ramp.seconds_judged == 0


def test_opening_to_holding_begins_the_step() -> None:
    ramp = machine()
    assert ramp.feed(seen(second(1.0, "opening", 0, 50))).actions == ()
    transition = ramp.feed(seen(second(2.0, "holding", 0)))
    assert transition.state is RampState.HOLDING
    assert transition.actions == (BeginStep(0, 100),)


def test_a_hold_goes_on_quietly_then_ends_when_the_next_step_opens() -> None:
    ramp = machine()
    first, middle, last = (second(t, "holding", 0) for t in (2.0, 3.0, 4.0))
    ramp.feed(seen(first))
    assert ramp.feed(seen(middle)).actions == ()
    assert ramp.feed(seen(last)).state is RampState.HOLDING
    transition = ramp.feed(seen(second(5.0, "opening", 1, 150)))
    assert transition.state is RampState.OPENING
    assert transition.actions == (FinishStep(0, first, last),)


def test_holding_the_next_step_at_once_finishes_one_and_begins_the_other() -> None:
    ramp = machine()
    first = second(2.0, "holding", 0)
    ramp.feed(seen(first))
    nxt = second(3.0, "holding", 1, 200)
    transition = ramp.feed(seen(nxt))
    assert transition.state is RampState.HOLDING
    assert transition.actions == (FinishStep(0, first, first), BeginStep(1, 200))


def test_agents_ready_at_a_step_are_released_once() -> None:
    ramp = machine()
    assert ramp.feed(seen(second(1.0, "ready", 0))).actions == (ReleaseStep(0),)
    assert ramp.feed(seen(second(2.0, "ready", 0))).actions == ()
    assert ramp.feed(seen(second(3.0, "ready", 1))).actions == (ReleaseStep(1),)


def test_closing_ends_the_hold_where_the_first_agent_began_closing() -> None:
    ramp = machine()
    first = second(2.0, "holding", 2, 300)
    ramp.feed(seen(first))
    closing = second(3.0, "closing", 2, 250, closing=True)
    transition = ramp.feed(seen(closing, closing_t=2.5))
    assert transition.state is RampState.CLOSING
    assert transition.actions == (FinishStep(2, first, first, until=2.5),)
    judged = ramp.seconds_judged
    later = ramp.feed(seen(second(4.0, "final", 2, 0, closing=True), available_bytes=1))
    assert later.state is RampState.CLOSING and later.actions == ()  # no memory stop either
    assert ramp.seconds_judged == judged  # the closing step's seconds are not judged


def test_closing_while_opening_has_no_hold_to_finish() -> None:
    ramp = machine()
    transition = ramp.feed(seen(second(1.0, "mixed", 0, 40, closing=True), closing_t=0.9))
    assert transition.state is RampState.CLOSING and transition.actions == ()


def test_past_the_deadline_the_agents_are_told_to_end_then_left_after_the_grace() -> None:
    ramp = machine()
    transition = ramp.feed(seen(second(1.0, "opening", 0, 10), elapsed_s=100.5))
    assert transition.actions == (EndAgents("overran"),)
    assert ramp.overran_s == 60.5  # from the planned 40 s
    assert ramp.feed(seen(second(2.0, "opening", 0, 10), elapsed_s=105.0)).state is (
        RampState.OPENING
    )
    assert ramp.feed(RampSample(105.6)).state is RampState.DONE


def test_a_dead_server_ends_the_ramp_and_its_hold_is_still_read() -> None:
    ramp = machine()
    first = second(2.0, "holding", 0)
    ramp.feed(seen(first))
    transition = ramp.feed(RampSample(11.0, server_exit=-9))
    assert transition.state is RampState.DONE and ramp.server_exit == -9
    assert ramp.feed(seen(second(3.0, "holding", 0))).actions == ()  # done is done
    assert ramp.agents_exited().actions == (FinishStep(0, first, first),)
    assert not ramp.closing_follows


def test_a_lost_load_host_ends_the_ramp_and_its_hold_is_not_guessed() -> None:
    ramp = machine()
    ramp.feed(seen(second(2.0, "holding", 0)))
    transition = ramp.feed(RampSample(11.0, lost="host harness-fleet-2 lost"))
    assert transition.state is RampState.DONE and ramp.lost == "host harness-fleet-2 lost"
    assert ramp.agents_exited().actions == ()
    assert not ramp.closing_follows


def test_the_agents_exiting_finishes_the_hold_and_the_closing_follows() -> None:
    ramp = machine()
    first = second(2.0, "holding", 2, 300)
    ramp.feed(seen(first))
    transition = ramp.agents_exited()
    assert transition.state is RampState.DONE
    assert transition.actions == (FinishStep(2, first, first),)
    assert ramp.closing_follows


def test_under_the_memory_reserve_the_ramp_ends_once_and_that_is_its_break() -> None:
    ramp = machine()
    low = seen(second(7.0, "opening", 1, 150), available_bytes=RESERVE_BYTES - 1)
    assert ramp.feed(low).actions == (EndAgents("memory"),)
    assert ramp.memory_stop == {"connections": 150, "available": RESERVE_BYTES - 1}
    assert ramp.breaking_point is not None
    assert (ramp.breaking_point["limit"], ramp.breaking_point["t"]) == ("memory", 7.0)
    assert ramp.feed(seen(second(8.0, "opening", 1, 160), available_bytes=1)).actions == ()


def stalled_seconds(count: int) -> list[RampSecond]:
    return [second(float(t), "opening", 0, 50, tick_ms=2_000.0) for t in range(1, count + 1)]


@pytest.mark.parametrize(("stress", "ends"), [(True, True), (False, False)])
def test_the_breaking_point_ends_a_stress_ramp_only(stress: bool, ends: bool) -> None:
    ramp = machine(stress=stress)
    actions = [action for now in stalled_seconds(6) for action in ramp.feed(seen(now)).actions]
    assert ramp.breaking_point is not None
    assert ramp.breaking_point["reason"].startswith("tick max 2000 ms")
    assert actions == ([EndAgents("breaking point")] if ends else [])


def test_seconds_are_judged_a_second_apart() -> None:
    ramp = machine()
    for t in (1.0, 1.5, 2.0, 2.4, 3.1):
        ramp.feed(seen(second(t, "opening", 0, 50)))
    assert ramp.seconds_judged == 3  # 1.0, 2.0, 3.1


def test_the_machine_of_a_ramp_takes_its_targets_mode_and_deadline() -> None:
    ramp = ConnectionRamp(start=100, target=300, step=100, hold_s=5.0, mode="stress")
    made = RampMachine.for_ramp(ramp, reserve_bytes=RESERVE_BYTES)
    assert made.targets == TARGETS and made.stress
    assert made.deadline_s == ramp_deadline_s(ramp) > ramp.planned_s + RAMP_OVERRUN_MARGIN_S - 1


def test_a_ramp_short_of_its_steps_says_why_unless_something_else_does() -> None:
    ramp = ConnectionRamp(start=100, target=300, step=100, hold_s=5.0)
    ended = {"stopped_by": ["signal"], "opened": 150}
    result = ConnectionRampResult(server_exit=-9)
    note = cut_short_note(result, ramp, ended, elapsed_s=12.0, stress=False)
    assert note == (
        "the ramp ended after 12 s with 0 of 3 steps held (agents stopped by: signal);"
        " the server exited -9"
    )
    limited = cut_short_note(
        result, ramp, {**ended, "stopped_by": ["time-limit"]}, elapsed_s=12.0, stress=False
    )
    assert limited is not None and limited.startswith("the agents stopped at their time limit")
    said = ConnectionRampResult(memory_stop={"connections": 150, "available": 1})
    assert cut_short_note(said, ramp, ended, elapsed_s=12.0, stress=False) is None

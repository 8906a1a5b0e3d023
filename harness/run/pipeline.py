"""A case as a pipeline: phases run in order, and why a case ended is a value.

Each phase is a function of the case's state that either lets the case go on (None) or
ends it with a `CaseEnd`: the phase, a kind from a closed set (`skipped`: the framework
cannot run this case; `failed`: it ran and fell short) and the one-line reason a Case
records as its `error`. No phase after an end runs.

What a phase opens (the sink's store, the server's cgroup, the server itself) it enters on
the state's `held` ExitStack, so it is released on every path — an end, an exception
(a KeyboardInterrupt included), the last phase done — the last entered first.

The phases of a case, in order (harness.run.case assembles them):

- prepare: the framework installed and able to run this case, its folder, the sink's store
- start: the server started, in its own cgroup where the run may make one
- probe: what it negotiates (TLS, ALPN, h2c) and, a command's, which routes it serves
- verify: the contract's checks over the case's protocol
- measure: the ramp's case kind (HTTP steps, connection ramp, memcached steps)
- stop: the monitor and the server stopped (also on every earlier end: `held`)
- annotate: the cgroup's record, the memory peak, the OOM kills, the telemetry note
- reconcile: the sink audited against what was acknowledged
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar, get_args

Phase = Literal["prepare", "start", "probe", "verify", "measure", "stop", "annotate", "reconcile"]
PHASES: tuple[Phase, ...] = get_args(Phase)
EndKind = Literal["skipped", "failed"]
END_KINDS: tuple[EndKind, ...] = get_args(EndKind)


@dataclass(frozen=True)
class CaseEnd:
    """Why a case ended before its last phase, or failed in it: the phase, the kind (the
    Case's status) and the one-line reason (the Case's error)."""

    phase: Phase
    kind: EndKind
    reason: str

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        if self.kind not in END_KINDS:
            raise ValueError(f"end kind {self.kind!r} is not one of {', '.join(END_KINDS)}")
        if not self.reason:
            raise ValueError(f"a case {self.kind} in its {self.phase} phase needs a reason")


class HoldsResources(Protocol):
    """A pipeline's state: what its phases opened is entered on `held`."""

    held: ExitStack


State = TypeVar("State", bound=HoldsResources)


@dataclass(frozen=True)
class PhaseStep(Generic[State]):
    """One phase of a pipeline: its name and the function that runs it."""

    phase: Phase
    run: Callable[[State], CaseEnd | None]


def run_pipeline(state: State, steps: Sequence[PhaseStep[State]]) -> CaseEnd | None:
    """Run `steps` in order until one ends the case; its `CaseEnd`, or None when every
    phase ran. Whatever the phases entered on `state.held` is released before this
    returns or raises."""
    with state.held:
        for step in steps:
            end = step.run(state)
            if end is not None:
                return end
    return None

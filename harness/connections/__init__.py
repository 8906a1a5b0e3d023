"""Connection ramps (the WebSocket study): agent processes hold the connections across
every step.

A step is the agents' hold at its target, which they begin together. Each second the
runner reads the agents' lines and the server's telemetry; the breaking point is the
first connection count at which, for 5 consecutive seconds, the worst tick exceeds 1 s,
connections fail, or the server drops them; in stress mode the ramp ends there. In either
mode it ends where the host runs short of memory (memory_reserve_bytes), and that is its
breaking point, named `memory`. At the ramp's end the agents close every connection at
once and the runner follows that closing step until the server has closed them all.

The rooms:

- machine: the ramp as a state machine fed one poll at a time (pure);
- run: the I/O loop around it (`run_connection_ramp`) and the ramp's result;
- breaking: the breaking point judged second by second, the memory reserve (pure);
- agents: the agent processes the ramp reads (`AgentGroup`, `LocalAgents`);
- readings: a hold as a Step, memory read at each hold, memory per connection;
- closing: the closing step, followed and recorded.
"""

from harness.connections.agents import AgentGroup, LocalAgents
from harness.connections.breaking import (
    BreakWatch,
    RampSecond,
    find_breaking_point,
    memory_break,
    memory_reserve_bytes,
)
from harness.connections.closing import (
    closing_record,
    closing_timeout_s,
    first_closing_t,
    follow_closing,
)
from harness.connections.machine import RampMachine, RampState, ramp_deadline_s
from harness.connections.readings import (
    HOST_READINGS,
    cgroup_kb_per_connection,
    held_cgroup_bytes,
    held_reading,
    hold_step,
    memory_breakdown,
    memory_per_connection,
)
from harness.connections.run import ConnectionRampResult, run_connection_ramp

__all__ = [
    "HOST_READINGS",
    "AgentGroup",
    "BreakWatch",
    "ConnectionRampResult",
    "LocalAgents",
    "RampMachine",
    "RampSecond",
    "RampState",
    "cgroup_kb_per_connection",
    "closing_record",
    "closing_timeout_s",
    "find_breaking_point",
    "first_closing_t",
    "follow_closing",
    "held_cgroup_bytes",
    "held_reading",
    "hold_step",
    "memory_break",
    "memory_breakdown",
    "memory_per_connection",
    "memory_reserve_bytes",
    "ramp_deadline_s",
    "run_connection_ramp",
]

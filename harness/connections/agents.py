"""The agent processes of a connection ramp: what the ramp asks of them (`AgentGroup`),
and those that run on this machine (`LocalAgents`); a fleet's are harness.fleet.agents'.

The agents follow one schedule (a connection target per step), so unlike HTTP steps the
load is not restarted between steps. Each agent waits at a step's target (`ready`) until
the runner saw them all there, then they hold it together.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from drivers.agent.plan import AgentOutputs, agent_command, per_process_limit, split_schedule
from drivers.base import DriverProcesses
from model.ramps import ConnectionRamp
from model.scenarios import Scenario

if TYPE_CHECKING:
    from harness.topology import Topology


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

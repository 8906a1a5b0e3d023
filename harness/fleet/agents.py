"""A connection ramp's agents on a fleet's hosts (harness.connections.AgentGroup).

Every step's connection target is split over the hosts; each host splits its share over as
few agent processes as its open-file limit needs, connecting from its own addresses (so
from its own source ports: 32,256 per address toward one server port), at its share of
the open rate. All hosts start their agents together behind the barrier, and each host's
task publishes its agents' newest lines twice a second (a Dask Variable per host); the
ramp reads them as it reads local agents' files. At each target the agents wait until the
harness releases the step (one Variable every host's task reads), so all hold it together.
A lost host ends the ramp naming it.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drivers.agent.plan import (
    FD_HEADROOM,
    SOURCES_PER_PROCESS,
    agent_command,
    connect_ports,
    per_process_limit,
    split_schedule,
)
from harness.fleet.steps import BARRIER_TIMEOUT_S, HostTasks, split_evenly, start_figures, write_raw
from harness.fleet.tasks import StepSignals, hold_connections_on_host
from model.ramps import ConnectionRamp
from model.scenarios import Scenario

VARIABLE_TIMEOUT_S = 10.0  # a host's published lines must be readable within this

if TYPE_CHECKING:
    from harness.fleet.client import Fleet, LoadHost
    from harness.topology import Topology


def host_per_process_limit(facts: dict[str, Any]) -> int:
    """Sockets one agent process may hold on a host, from the facts it reported (as
    `per_process_limit` reckons it on this machine)."""
    ports = connect_ports(*facts["port_range"])
    sources = min(SOURCES_PER_PROCESS, max(1, len(facts["addresses"])))
    return max(1, min(int(facts["nofile_soft"]), ports * sources) - FD_HEADROOM)


class FleetAgents:
    """The agents of one connection ramp, run by one task per host."""

    def __init__(
        self,
        fleet: Fleet,
        ramp: ConnectionRamp,
        scenario: Scenario,
        server: Topology,
        load_cpus: str | None,
        raw_dir: Path,
        server_workers: int,
    ) -> None:
        self.fleet = fleet
        self.raw_dir = raw_dir
        targets = [int(step.offered) for step in ramp]
        splits = [split_evenly(target, len(fleet.hosts)) for target in targets]
        top = max(targets, default=0) or 1
        commands: dict[str, list[list[str]]] = {}
        per_host: dict[str, dict[str, Any]] = {}
        for index, host in enumerate(fleet.hosts):
            schedule = [split[index] for split in splits]
            per_process = host_per_process_limit(host.facts)
            shares = split_schedule(schedule, per_process, tuple(host.facts["addresses"]))
            commands[host.name] = [
                agent_command(
                    share,
                    host=server.host,
                    port=server.port,
                    path=scenario.path,
                    hold_s=ramp.hold_s,
                    open_rate_per_s=ramp.open_rate_per_s * max(schedule, default=0) / top,
                    payload=scenario.payload,
                    interval_s=scenario.message_interval_s,
                    processes=len(shares),
                    close=ramp.close,
                    python=host.facts["python_executable"],
                )
                for share in shares
            ]
            per_host[host.name] = {
                "agent_processes": len(shares),
                "connections_per_agent_process_max": per_process,
                "sources": list(host.facts["addresses"]),
                "target": schedule[-1] if schedule else 0,
            }
        self.limits: dict[str, Any] = {
            "agent_processes": sum(h["agent_processes"] for h in per_host.values()),
            "connections_per_agent_process_max": min(
                h["connections_per_agent_process_max"] for h in per_host.values()
            ),
            "agent_sources": [s for h in per_host.values() for s in h["sources"]],
            "server_sockets_max": server_workers * per_process_limit(),
            "hosts": per_host,
        }
        cpus = load_cpus if fleet.local else None
        # the agents stop by themselves at their --time-limit; a host past it is stuck
        limits_s = [float(c[c.index("--time-limit") + 1]) for cs in commands.values() for c in cs]
        self._timeout_s = max(limits_s) + 60.0

        def submit(host: LoadHost, signals: StepSignals) -> Any:
            return fleet.client.submit(
                hold_connections_on_host, host.name, signals, commands[host.name], cpus,
                BARRIER_TIMEOUT_S,
                key=f"agents-{host.name}-{uuid.uuid4().hex[:8]}",
                workers=[host.address], allow_other_workers=False, retries=0, pure=False,
            )  # fmt: skip

        self.tasks = HostTasks(fleet, "agents", list(fleet.hosts), submit)
        self._started = time.monotonic()
        self._lost: str | None = None
        try:
            self.tasks.start()
        except BaseException:
            self.tasks.close()
            raise
        from distributed import Variable

        self._lines = {
            host.name: Variable(self.tasks.signals.lines(host.name), client=fleet.client)
            for host in fleet.hosts
        }
        self._released = Variable(self.tasks.signals.released, client=fleet.client)

    @property
    def pids(self) -> list[int]:
        return []  # the agents run on the hosts; each host's task measures their CPU

    def running(self) -> bool:
        if time.monotonic() - self._started > self._timeout_s:
            self._lost = f"the agents did not end within {self._timeout_s:.0f} s"
            return False
        return self.tasks.running()

    def latest(self) -> dict[Any, dict[str, Any]]:
        """Every host's agents' newest lines, keyed host/index, each marked with its host."""
        latest: dict[Any, dict[str, Any]] = {}
        for name, variable in self._lines.items():  # each host set its own before the go
            for index, line in (variable.get(timeout=VARIABLE_TIMEOUT_S) or {}).items():
                latest[f"{name}/{index}"] = {**line, "host": name}
        return latest

    def lost(self) -> str | None:
        if self._lost is None:
            lost = self.tasks.lost()
            self._lost = str(lost) if lost is not None else None
        return self._lost

    def release(self, step: int) -> None:
        self._released.set(step)  # each host's task passes it on to its agents

    def end(self) -> None:
        self.tasks.stop()

    def finish(self) -> dict[Any, dict[str, Any]]:
        """Stop every host's agents, collect their final lines and raw output; the start
        skew goes into `limits.hosts`."""
        self.tasks.stop()
        deadline = time.monotonic() + 60.0
        while self.tasks.running() and time.monotonic() < deadline:
            time.sleep(0.25)
        final: dict[Any, dict[str, Any]] = {}
        try:
            outcomes = {
                name: future.result()
                for name, future in self.tasks.futures.items()
                if future.status == "finished"
            }
        finally:
            self.tasks.close()
        write_raw(self.raw_dir, outcomes)
        for name, figures in start_figures(outcomes, self.tasks.go_at).items():
            outcome = outcomes[name]
            self.limits["hosts"][name].update(figures, driver_cpu_s=outcome.driver_cpu_s)
            for index, line in outcome.final_lines.items():
                final[f"{name}/{index}"] = {**line, "host": name}
        return final

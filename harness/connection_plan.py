"""What N idle WebSocket connections need on this host: processes, source addresses, load
hosts, memory, conntrack entries and time (`harness plan-connections`).

Pure arithmetic: the host's facts come in as `ConnectionHost` (read at the edge by
harness.doctor.connection_host) and the memory of a connection as measured
(harness/data/measured.toml); nothing here reads /proc or starts anything. A plan that
cannot fit names the limit (`plan_refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from drivers.agent.plan import FD_HEADROOM, SOURCES_PER_PROCESS, connect_ports
from harness.measured import measured_value, measurements_under
from model.errors import UserError
from model.ramps import ConnectionRamp

KIB = 1024  # the harness's KB per connection (cgroup_kb_per_connection) is 1,024 bytes
GIB = 1024**3  # "GB" as `free -g` and the README's "23 GB box" count it


@dataclass(frozen=True)
class ServerMemory:
    """One server's memory under idle WebSocket connections, as measured: at its top held
    step of a run on `measured_workers` server workers."""

    kb_per_connection: float  # the slope of the server's RSS over the connections held
    rss_mb_at_measured: float  # the whole server's RSS at the measured point
    measured_connections: int  # the measured point: connections
    measured_workers: int  # and server workers

    @property
    def idle_process_bytes(self) -> int:
        """What one server process holds besides its connections: the RSS at the measured
        point less the connections' share, per worker."""
        rss_bytes = self.rss_mb_at_measured * 1e6  # the summary's MB are 10^6 bytes
        connections_bytes = self.kb_per_connection * KIB * self.measured_connections
        return max(0, round((rss_bytes - connections_bytes) / self.measured_workers))


# Measured once on this project's development box, each with its provenance (host, date,
# command, runs): harness/data/measured.toml (harness.measured). A framework not there has
# no measurement to plan from.
SERVER_MEMORY: dict[str, ServerMemory] = {
    name: ServerMemory(
        entry.value,
        rss_mb_at_measured=entry.at["server_rss_mb"],
        measured_connections=int(entry.at["connections"]),
        measured_workers=int(entry.at["server_workers"]),
    )
    for name, entry in measurements_under("server_memory.", "KiB/connection").items()
}
# the agents' RSS and the kernel's slab (both ends of a loopback connection) per connection
AGENT_KB_PER_CONNECTION = measured_value("agent_kb_per_connection", "KiB/connection")
KERNEL_KB_PER_CONNECTION = measured_value("kernel_kb_per_connection", "KiB/connection")
# SO_REUSEPORT spreads connections over the workers unevenly: room for the fullest one
REUSEPORT_SPREAD = 1.10


@dataclass(frozen=True)
class ConnectionHost:
    """The facts of this host that bound how many connections it holds."""

    hostname: str
    cpu_count: int
    open_files: int  # RLIMIT_NOFILE, soft: what every server and agent process gets
    open_files_hard: int  # the most a process could raise it to
    port_range: tuple[int, int]  # net.ipv4.ip_local_port_range, both ends included
    somaxconn: int  # net.core.somaxconn: the accept queue, not the connections held
    memory_total_bytes: int  # MemTotal
    memory_available_bytes: int  # MemAvailable
    conntrack_max: int | None  # net.netfilter.nf_conntrack_max; None: no conntrack here
    conntrack_count: int | None  # entries tracked now in this network namespace
    # whether a loopback connection of the harness's own took an entry (None: not asked)
    loopback_tracked: bool | None

    def __post_init__(self) -> None:
        low, high = self.port_range
        if not 0 < low <= high:
            raise ValueError(f"port_range {self.port_range!r} is not low..high")
        for name in ("cpu_count", "open_files", "memory_total_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, not {getattr(self, name)!r}")

    @property
    def ports_per_address(self) -> int:
        """Source ports connect() hands out readily from one address toward one server
        address:port: the even half of the range (drivers.agent.plan.connect_ports)."""
        return connect_ports(*self.port_range)


def conntrack_tracked(host: ConnectionHost) -> bool | None:
    """Whether the plan's connections would take conntrack entries: False without the
    conntrack module; True while entries are tracked; else what a loopback connection of
    our own showed (the kernel registers conntrack's hooks in a namespace only once a
    rule needs them; a local fleet's traffic reaches the servers through this namespace,
    and `fleet up` adds no rule); None when nothing tells."""
    if host.conntrack_max is None:
        return False
    if host.conntrack_count:
        return True
    return host.loopback_tracked


@dataclass(frozen=True)
class FrameworkPlan:
    """One server's share of a plan: its processes and its memory with everything else's."""

    framework: str
    server_processes_min: int  # connections / what one process may hold
    server_workers: int  # with room for SO_REUSEPORT's uneven spread
    kb_per_connection: float
    server_bytes: int  # the connections' and the workers' own
    memory_total_bytes: int  # server + agents + kernel
    memory_fits: bool


@dataclass(frozen=True)
class ConnectionPlan:
    """What `connections` idle WebSocket connections need on `host`."""

    connections: int
    host: ConnectionHost
    server_connections_per_process: int  # open files less what the process needs itself
    # the same, or fewer when its source addresses' ports are fewer (harness.fleet.agents)
    agent_connections_per_process: int
    source_addresses: int
    addresses_per_host: int
    fleet_hosts: int
    agent_processes: int  # over every load host, each host's share split on its own
    agent_bytes: int
    kernel_bytes: int
    conntrack_entries: int
    conntrack_tracked: bool | None
    open_rate_per_s: float
    opening_s: float  # opening every connection at the open rate
    ramp_step: int
    ramp_hold_s: float
    ramp_steps: int
    ramp_s: float  # the whole ramp: opening and every step's hold
    frameworks: tuple[FrameworkPlan, ...]

    def record(self) -> dict[str, Any]:
        """The plan as `--json` prints it (bytes, seconds and counts; no formatting)."""
        data = asdict(self)
        data["host"]["port_range"] = list(self.host.port_range)
        data["ports_per_address"] = self.host.ports_per_address
        data["conntrack_fits"] = conntrack_fits(self)
        data["refusal"] = plan_refusal(self)
        return data


def plan_frameworks(spec: str, registered: Iterable[str] = ()) -> list[str]:
    """`all` (every measured server) or `a,b`: the servers to plan for; a name without a
    measurement is a UserError naming those with one (and saying so of a `registered`
    server that was never measured)."""
    measured = list(SERVER_MEMORY)
    if spec.strip() == "all":
        return measured
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in SERVER_MEMORY]
    if unknown or not names:
        known = set(registered)
        what = (
            f"no measured memory per idle WebSocket connection for {', '.join(unknown)}"
            if unknown and all(name in known for name in unknown)
            else f"unknown framework {', '.join(unknown) or repr(spec)}"
        )
        raise UserError(f"{what}: choose from all, {', '.join(measured)}")
    return list(dict.fromkeys(names))


def framework_plan(
    name: str, connections: int, *, per_process: int, others_bytes: int, available_bytes: int
) -> FrameworkPlan:
    """Server `name`'s share of a plan: `connections` over processes of `per_process`
    each (with SO_REUSEPORT's spread), its memory (SERVER_MEMORY's) with `others_bytes`
    (the agents' and the kernel's) against `available_bytes`."""
    memory = SERVER_MEMORY[name]
    processes = math.ceil(connections / per_process)
    workers = max(processes, math.ceil(connections * REUSEPORT_SPREAD / per_process))
    server_bytes = round(
        connections * memory.kb_per_connection * KIB + workers * memory.idle_process_bytes
    )
    total = server_bytes + others_bytes
    return FrameworkPlan(
        framework=name,
        server_processes_min=processes,
        server_workers=workers,
        kb_per_connection=memory.kb_per_connection,
        server_bytes=server_bytes,
        memory_total_bytes=total,
        memory_fits=total <= available_bytes,
    )


def plan_connections(
    connections: int,
    frameworks: Sequence[str],
    host: ConnectionHost,
    *,
    open_rate_per_s: float,
    ramp_step: int,
    ramp_hold_s: float,
    addresses_per_host: int,
) -> ConnectionPlan:
    """The plan for `connections` held at once by each of `frameworks` (SERVER_MEMORY's
    names) on `host`, opened at `open_rate_per_s` in steps of `ramp_step` held
    `ramp_hold_s` each, from load hosts of `addresses_per_host` source addresses."""
    if connections < 1:
        raise ValueError(f"connections must be >= 1, not {connections!r}")
    if open_rate_per_s <= 0 or ramp_hold_s <= 0 or ramp_step < 1 or addresses_per_host < 1:
        raise ValueError("open rate, hold and step must be positive, addresses at least 1")
    if host.open_files <= FD_HEADROOM:
        raise UserError(
            f"the open-files limit ({host.open_files:,}) leaves no socket after the "
            f"{FD_HEADROOM} a process needs for itself: open files"
        )
    per_process = host.open_files - FD_HEADROOM
    ports = host.ports_per_address
    addresses = math.ceil(connections / ports)
    hosts = math.ceil(addresses / addresses_per_host)
    # each load host splits its share over its own agent processes, each connecting from
    # up to SOURCES_PER_PROCESS of the host's addresses (harness.fleet.agents)
    sources = min(SOURCES_PER_PROCESS, addresses_per_host)
    agent_per_process = max(1, min(host.open_files, ports * sources) - FD_HEADROOM)
    per_host = math.ceil(connections / hosts)
    agent_processes = hosts * math.ceil(per_host / agent_per_process)
    agent_bytes = round(connections * AGENT_KB_PER_CONNECTION * KIB)
    kernel_bytes = round(connections * KERNEL_KB_PER_CONNECTION * KIB)
    step = min(ramp_step, connections)
    # the first step takes the remainder, so the last one is `connections` itself
    ramp = ConnectionRamp(
        start=connections % step or step,
        target=connections,
        step=step,
        hold_s=ramp_hold_s,
        open_rate_per_s=open_rate_per_s,
    )
    plans = [
        framework_plan(
            name,
            connections,
            per_process=per_process,
            others_bytes=agent_bytes + kernel_bytes,
            available_bytes=host.memory_available_bytes,
        )
        for name in frameworks
    ]
    return ConnectionPlan(
        connections=connections,
        host=host,
        server_connections_per_process=per_process,
        agent_connections_per_process=agent_per_process,
        source_addresses=addresses,
        addresses_per_host=addresses_per_host,
        fleet_hosts=hosts,
        agent_processes=agent_processes,
        agent_bytes=agent_bytes,
        kernel_bytes=kernel_bytes,
        conntrack_entries=connections,  # one per TCP connection, both directions in it
        conntrack_tracked=conntrack_tracked(host),
        open_rate_per_s=open_rate_per_s,
        opening_s=connections / open_rate_per_s,
        ramp_step=step,
        ramp_hold_s=ramp_hold_s,
        ramp_steps=len(list(ramp)),
        ramp_s=ramp.planned_s,
        frameworks=tuple(plans),
    )


def conntrack_fits(plan: ConnectionPlan) -> bool:
    """Whether the conntrack table holds the plan's connections: always when they are not
    tracked; when they may be (tracked, or nothing tells), only within nf_conntrack_max."""
    if plan.conntrack_tracked is False or plan.host.conntrack_max is None:
        return True
    return plan.conntrack_entries <= plan.host.conntrack_max


def gigabytes(size_bytes: float) -> str:
    """`29.6 GB` (GB of 2^30 bytes)."""
    return f"{size_bytes / GIB:,.1f} GB"


def plan_refusal(plan: ConnectionPlan) -> str | None:
    """One line naming each limit the plan does not fit (None when it fits): conntrack for
    every server alike, then each server whose memory does not fit."""
    reasons = []
    if not conntrack_fits(plan):
        reasons.append(
            f"{plan.connections:,} connections need {plan.conntrack_entries:,} conntrack "
            f"entries, nf_conntrack_max is {plan.host.conntrack_max:,}: conntrack"
        )
    available = gigabytes(plan.host.memory_available_bytes)
    for framework in plan.frameworks:
        if not framework.memory_fits:
            reasons.append(
                f"{framework.framework}: {plan.connections:,} connections need "
                f"{gigabytes(framework.memory_total_bytes)} of memory, this host has "
                f"{available} available: memory"
            )
    return "; ".join(reasons) or None

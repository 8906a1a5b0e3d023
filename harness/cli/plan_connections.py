"""`harness plan-connections N --frameworks a,b`: what N idle WebSocket connections need
on this host — processes, source addresses, load hosts, memory, conntrack, time — and a
refusal naming the limit when they cannot fit (the arithmetic: harness.connection_plan)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.options import console
from model.errors import UserError

if TYPE_CHECKING:
    from harness.connection_plan import ConnectionPlan

# the ws-ramp profile's ramp gives the open rate and step by default
RAMP_PROFILE = "ws-ramp"


def _duration(seconds: float) -> str:
    """`2 h 47 min`, `83 min`, `45 s`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def plan_connections_command(
    connections: int = typer.Argument(..., min=1, metavar="N", help="Connections held at once."),
    frameworks: str = typer.Option(
        "all", help="Servers to plan for: all (every one measured) or a,b."
    ),
    open_rate: float | None = typer.Option(
        None,
        "--open-rate",
        min=0.001,
        help=f"New connections per second (default: the {RAMP_PROFILE} profile's).",
    ),
    step: int | None = typer.Option(
        None, "--step", min=1, help=f"Connections a ramp step adds (default: {RAMP_PROFILE}'s)."
    ),
    addresses_per_host: int = typer.Option(
        4, "--addresses-per-host", min=1, help="Source addresses per load host."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
) -> None:
    """What N idle WebSocket connections need here: server and agent processes (the
    open-files limit), source addresses and load hosts (the port range), memory (each
    server's measured KB per connection, the agents', the kernel's) against MemAvailable,
    conntrack entries, and the ramp's time. Exit 1 naming the limit a plan does not fit."""
    from harness.connection_plan import plan_connections, plan_frameworks, plan_refusal
    from harness.doctor import connection_host
    from harness.fleet.local import FLEET_PORT_RANGE
    from harness.profile import load_profile
    from model.ramps import ConnectionRamp
    from servers import FRAMEWORKS

    names = plan_frameworks(frameworks, registered=FRAMEWORKS)
    ramp = load_profile(RAMP_PROFILE).ramp
    assert isinstance(ramp, ConnectionRamp), ramp  # ws-ramp is a connection ramp
    # the connections come from load hosts (harness fleet up), whose port range is the fleet's
    host = dataclasses.replace(connection_host(), port_range=FLEET_PORT_RANGE)
    plan = plan_connections(
        connections,
        names,
        host,
        open_rate_per_s=open_rate or ramp.open_rate_per_s,
        ramp_step=step or int(ramp.step),
        ramp_hold_s=ramp.hold_s,
        addresses_per_host=addresses_per_host,
    )
    if as_json:
        print(json.dumps(plan.record(), indent=2))
    else:
        _print_plan(plan)
    refusal = plan_refusal(plan)
    if refusal:
        raise UserError(refusal)


def _print_plan(plan: ConnectionPlan) -> None:
    """The plan as two tables: what it needs, then memory per server."""
    from harness.connection_plan import gigabytes

    host = plan.host
    console.print(
        f"{plan.connections:,} idle WebSocket connections on {escape(host.hostname)}: "
        f"{host.cpu_count} CPUs, {gigabytes(host.memory_total_bytes)} of memory "
        f"({gigabytes(host.memory_available_bytes)} available)",
        highlight=False,
    )
    needs = Table("need", "plan", show_header=False)
    for need, said in _process_needs(plan) + _network_needs(plan) + _host_needs(plan):
        needs.add_row(need, said)
    console.print(needs, highlight=False)
    _print_memory(plan)


def _process_needs(plan: ConnectionPlan) -> list[tuple[str, str]]:
    """Connections per process, then server and agent processes."""
    from drivers.agent.plan import FD_HEADROOM
    from harness.connection_plan import REUSEPORT_SPREAD

    host = plan.host
    agent_note = (
        ""
        if plan.agent_connections_per_process == plan.server_connections_per_process
        else f"; an agent process {plan.agent_connections_per_process:,} (its addresses' ports)"
    )
    # every server holds as many connections per process: the first one's counts are all's
    workers = plan.frameworks[0].server_workers
    minimum = plan.frameworks[0].server_processes_min
    per_host = plan.agent_processes // plan.fleet_hosts
    return [
        (
            "per process",
            f"{plan.server_connections_per_process:,} connections: open files "
            f"{host.open_files:,} (hard limit {host.open_files_hard:,}) less {FD_HEADROOM} for "
            f"the process itself{agent_note}",
        ),
        (
            "server processes",
            f"at least {minimum:,}: --process-model workers:{workers} "
            f"({(REUSEPORT_SPREAD - 1) * 100:.0f} % more for SO_REUSEPORT's uneven spread)",
        ),
        (
            "agent processes",
            f"{plan.agent_processes:,}: {per_host} on each of {plan.fleet_hosts} load hosts"
            if plan.fleet_hosts > 1
            else f"{plan.agent_processes:,} on this machine",
        ),
    ]


def _network_needs(plan: ConnectionPlan) -> list[tuple[str, str]]:
    """Source addresses, load hosts and conntrack entries."""
    from harness.connection_plan import conntrack_fits

    host = plan.host
    low, high = host.port_range
    limit = f"nf_conntrack_max {host.conntrack_max:,}" if host.conntrack_max else "no table"
    return [
        (
            "source addresses",
            f"{plan.source_addresses:,}: {host.ports_per_address:,} ports each toward one "
            f"server address:port (the even ports of {low}-{high}, the range fleet up sets: "
            "connect() takes even ports first and slows to a crawl once they are gone)",
        ),
        (
            "load hosts",
            f"{plan.fleet_hosts} of {plan.addresses_per_host} addresses: harness fleet up "
            f"--hosts {plan.fleet_hosts} --addresses-per-host {plan.addresses_per_host}"
            if plan.fleet_hosts > 1
            else "this machine: its agents connect from 127.0.0.x, no fleet needed",
        ),
        (
            "conntrack",
            f"{plan.conntrack_entries:,} entries, {limit}: {_conntrack_said(plan)}"
            + ("" if conntrack_fits(plan) else ": does not fit"),
        ),
    ]


def _conntrack_said(plan: ConnectionPlan) -> str:
    """Whether the plan's connections would be tracked here, and what tells."""
    host = plan.host
    if plan.conntrack_tracked is None:
        return "may be tracked (nothing tells; counted as tracked)"
    if plan.conntrack_tracked:
        return "tracked here" + (
            f" ({host.conntrack_count:,} entries now)"
            if host.conntrack_count
            else " (a loopback connection took an entry)"
        )
    return "not tracked here" + (
        " (no conntrack module)"
        if host.conntrack_max is None
        else " (a loopback connection took no entry)"
    )


def _host_needs(plan: ConnectionPlan) -> list[tuple[str, str]]:
    """The CPUs, somaxconn and the ramp's time."""
    host = plan.host
    return [
        (
            "CPUs",
            f"{host.cpu_count} here, shared by {plan.frameworks[0].server_workers} server "
            f"workers and {plan.agent_processes} agent processes",
        ),
        (
            "somaxconn",
            f"{host.somaxconn:,}: each listening socket's accept queue (handshakes waiting, "
            "not connections held)",
        ),
        (
            "time",
            f"opening at {plan.open_rate_per_s:g}/s: {_duration(plan.opening_s)}; the ramp "
            f"({plan.ramp_steps:,} steps of {plan.ramp_step:,}, {plan.ramp_hold_s:g} s holds): "
            f"{_duration(plan.ramp_s)}",
        ),
    ]


def _print_memory(plan: ConnectionPlan) -> None:
    """Memory per server: its connections' and workers', the agents', the kernel's."""
    from harness.connection_plan import (
        AGENT_KB_PER_CONNECTION,
        KERNEL_KB_PER_CONNECTION,
        gigabytes,
    )

    memory = Table(
        "framework", "KB/conn", "workers", "server", "agents", "kernel", "total", "available",
        "fits",
    )  # fmt: skip
    console.print(
        f"memory: per connection the server's measured KB, the agents' "
        f"{AGENT_KB_PER_CONNECTION} KB and the kernel's {KERNEL_KB_PER_CONNECTION} KB (both "
        "ends); each server worker's own besides (GB of 2^30 bytes)",
        highlight=False,
    )
    for framework in plan.frameworks:
        memory.add_row(
            framework.framework,
            f"{framework.kb_per_connection:.1f}",
            str(framework.server_workers),
            gigabytes(framework.server_bytes),
            gigabytes(plan.agent_bytes),
            gigabytes(plan.kernel_bytes),
            gigabytes(framework.memory_total_bytes),
            gigabytes(plan.host.memory_available_bytes),
            "yes" if framework.memory_fits else "no",
        )
    console.print(memory, highlight=False)

"""`harness bench`: our server against the framework's minimal app, same core, same run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from harness.cli.options import (
    AGENT_CPUS_OPTION,
    FLEET_CA_OPTION,
    FLEET_CERT_OPTION,
    FLEET_KEY_OPTION,
    FLEET_OPTION,
    INSECURE_FLEET_OPTION,
    PROTOCOL_OPTION,
    SERVER_ADDRESS_OPTION,
    SERVER_OPTION,
    SERVERS_FILE_OPTION,
    TLS_CERT_OPTION,
    TLS_KEY_OPTION,
    check_cpus,
    console,
)
from model.errors import UserError
from servers import FRAMEWORKS

if TYPE_CHECKING:
    from harness.bench_ws import WsBenchResult
    from harness.fleet.client import FleetAccess


def bench_command(
    frameworks: str = typer.Option("all", help="all, or a comma-separated list of frameworks."),
    loop: str = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado."),
    server_cpus: str = typer.Option("0", help="CPUs for the servers."),
    load_cpus: str = typer.Option("1", help="CPUs for wrk."),
    agent_cpus: str = AGENT_CPUS_OPTION,
    connections: int = typer.Option(
        None,
        help="wrk connections (100); with --ws, idle WebSocket connections at the top step "
        "(15,000).",
        show_default=False,
    ),
    duration_s: float = typer.Option(3.0, "--duration", help="Seconds per wrk run."),
    rounds: int = typer.Option(
        None,
        help="Rounds (ours and minimal, the order alternating) per framework, at least "
        "(10; with --ws, exactly: 3).",
        show_default=False,
    ),
    precision_pct: float = typer.Option(
        3.0,
        "--precision",
        metavar="PCT",
        help="Rounds go on until the ratio's 95 % interval is within ±PCT % (0: --rounds only).",
    ),
    max_time_s: float = typer.Option(
        240.0,
        "--max-time",
        metavar="SECONDS",
        help="Per framework, for --precision, once --rounds ran (0: none).",
    ),
    max_rounds: int = typer.Option(60, help="Rounds per framework, at most."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    protocol: str = PROTOCOL_OPTION,
    tls_cert: Path = TLS_CERT_OPTION,
    tls_key: Path = TLS_KEY_OPTION,
    ws: bool = typer.Option(
        False,
        "--ws",
        help="Idle WebSocket connections instead of GET /: KB per connection and CPU µs per "
        "opened connection of our server against the runtime's minimal WebSocket server.",
    ),
    hold_s: float = typer.Option(
        3.0, "--hold", help="With --ws: seconds each of the 5 connection steps is held."
    ),
    open_rate: float = typer.Option(
        None,
        "--open-rate",
        help="With --ws: connections opened per second (default: the top step in 10 s, "
        "at most 1,500 a second; 800 past one process).",
        show_default=False,
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        help="With --ws: processes of each app on its port (default: one, or as many as "
        "--connections need past one process's open files).",
        show_default=False,
    ),
    fleet: str = FLEET_OPTION,
    server_address: str = SERVER_ADDRESS_OPTION,
    fleet_ca: Path = FLEET_CA_OPTION,
    fleet_cert: Path = FLEET_CERT_OPTION,
    fleet_key: Path = FLEET_KEY_OPTION,
    insecure_fleet: bool = INSECURE_FLEET_OPTION,
) -> None:
    """GET / on our server against the framework's minimal app, same core, same run (wrk).
    A plugin's or a command's server is measured against its `minimal` command; with
    --protocol, both on each protocol (wrk speaks h1 and h1-tls).

    With --ws: idle WebSocket connections (the agent, ramped in 5 steps up to
    --connections) on our server and on the runtime's minimal WebSocket server
    (servers/minimal), each started afresh per round in a cgroup of its own on the server
    CPUs: KB per connection (the slope of the cgroup's memory over the steps; RSS beside
    it), CPU µs per opened connection, and ours / minimal with a 95 % interval and a
    verdict against 1.25×. Past one process's open files both apps run as --workers on
    one port; --fleet runs the agents on a fleet's load hosts (local:N: namespaces here)."""
    if not ws and (workers is not None or fleet is not None):
        raise UserError("--workers and --fleet go with --ws (GET / runs one process, wrk here)")
    if ws:
        from harness.bench_ws import WS_BENCH_CONNECTIONS, WS_BENCH_ROUNDS
        from harness.fleet.client import FleetAccess

        if protocol and protocol != "h1":
            raise UserError("bench --ws measures WebSockets over cleartext HTTP/1.1 (h1) only")
        bench_ws(
            frameworks=frameworks,
            loop=loop,
            server_cpus=server_cpus,
            agent_cpus=agent_cpus or load_cpus,
            connections=connections if connections is not None else WS_BENCH_CONNECTIONS,
            rounds=rounds if rounds is not None else WS_BENCH_ROUNDS,
            hold_s=hold_s,
            open_rate=open_rate,
            as_json=as_json,
            servers=servers,
            servers_file=servers_file,
            workers=workers,
            fleet=fleet,
            server_address=server_address,
            fleet_access=FleetAccess(
                str(fleet_ca) if fleet_ca else None,
                str(fleet_cert) if fleet_cert else None,
                str(fleet_key) if fleet_key else None,
                insecure_fleet,
            ),
        )
        return
    connections = connections if connections is not None else 100
    rounds = rounds if rounds is not None else 10
    from drivers.wrk import WrkDriver
    from harness.bench import bench_framework, bench_unsupported
    from harness.frameworks import register_servers, select_frameworks
    from harness.profile import parse_protocols
    from harness.tls import run_certificates
    from harness.tools import tool_path

    try:
        protocols = parse_protocols(protocol or "h1")
    except ValueError as error:
        raise UserError(f"--protocol: {error}") from None
    unspoken = [p for p in protocols if p not in WrkDriver.protocols]
    if unspoken:
        raise UserError(
            f"bench runs wrk, which does not speak {', '.join(unspoken)} "
            f"(it speaks {', '.join(WrkDriver.protocols)})"
        )
    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together (a certificate and its key)")

    load_cpus = agent_cpus or load_cpus
    register_servers(servers, servers_file)
    # baselines have no minimal app: bench measures our server against the framework's own
    chosen = select_frameworks(frameworks)
    names = [n for n in chosen if FRAMEWORKS[n].role == "framework" and FRAMEWORKS[n].has_minimal]
    if not names:
        raise UserError(
            "bench compares frameworks with their minimal apps; none of "
            f"{', '.join(chosen)} has one (a servers file's table gives one: minimal = ...)"
        )
    check_cpus(server_cpus)
    check_cpus(load_cpus)
    if rounds < 2 or max_rounds < rounds:
        raise UserError(f"--rounds must be at least 2 and --max-rounds at least it ({rounds})")
    if not 0 <= precision_pct < 100 or max_time_s < 0:
        raise UserError("--precision is a percentage in 0..100 and --max-time seconds >= 0")
    if tool_path("wrk") is None:
        raise UserError("wrk not found: run `harness doctor --install`")
    pairs = [(n, p) for n in names for p in protocols if bench_unsupported(n, p) is None]
    for name, chosen in ((n, p) for n in names for p in protocols):
        why = bench_unsupported(name, chosen)
        if why is not None:
            console.print(f"[yellow]skipped:[/] {name} on {chosen}: not supported: {why}")
    if not pairs:
        raise UserError(f"nothing to bench on {', '.join(protocols)}: see the reasons above")
    results = []
    what = f"≥ {rounds} rounds to ±{precision_pct:g} %" if precision_pct else f"{rounds} rounds"
    with run_certificates(protocols, tls_cert, tls_key) as certificates:
        for name, chosen in pairs:
            chosen_loop = loop if loop in FRAMEWORKS[name].loops else None
            status = f"bench {name} ({chosen}): {what} of 2 × {duration_s:g} s…"
            with console.status(status):
                results.append(
                    bench_framework(
                        name,
                        loop=chosen_loop,
                        server_cpus=server_cpus,
                        load_cpus=load_cpus,
                        connections=connections,
                        duration_s=duration_s,
                        rounds=rounds,
                        precision_pct=precision_pct or None,
                        max_rounds=max_rounds,
                        max_time_s=max_time_s or None,
                        protocol=chosen,
                        certificates=certificates,
                    )
                )
    if as_json:
        rows = [{**r.__dict__, "half_width_pct": r.half_width_pct} for r in results]
        print(json.dumps(rows, indent=2))
        return
    columns = ("framework", "loop", "protocol", "ours req/s", "minimal req/s",
               "ours / minimal [95 % CI]", "rounds", "±", "precision")  # fmt: skip
    table = Table(*columns)
    for r in results:
        ci = f" [{r.ratio_ci[0]:.1%}, {r.ratio_ci[1]:.1%}]" if r.ratio_ci else ""
        width = r.half_width_pct
        if r.precision_pct is None:
            state = "–"
        elif r.imprecise_reason:
            state = f"[yellow]imprecise[/]: {r.imprecise_reason}"
        else:
            state = f"[green]within ±{r.precision_pct:g} %[/]"
        table.add_row(
            r.framework,
            r.loop or FRAMEWORKS[r.framework].loops[0],
            r.protocol,
            f"{r.ours_requests_per_s:,.0f}",
            f"{r.minimal_requests_per_s:,.0f}",
            f"{r.ratio:.1%}{ci}",
            str(r.rounds),
            f"±{width:.1f} %" if width is not None else "–",
            state,
        )
    console.print(table)


def bench_ws(
    *,
    frameworks: str,
    loop: str | None,
    server_cpus: str,
    agent_cpus: str,
    connections: int,
    rounds: int,
    hold_s: float,
    open_rate: float | None,
    as_json: bool,
    servers: list[str],
    servers_file: Path | None,
    workers: int | None = None,
    fleet: str | None = None,
    server_address: str | None = None,
    fleet_access: FleetAccess | None = None,
) -> None:
    """`harness bench --ws`: every chosen framework with a minimal WebSocket server."""
    import contextlib
    import dataclasses
    import resource

    from drivers.agent.plan import FD_HEADROOM
    from harness.bench_ws import (
        WS_BENCH_STEPS,
        bench_ws_framework,
        ws_bench_unsupported,
        ws_workers,
    )
    from harness.frameworks import register_servers, select_frameworks

    register_servers(servers, servers_file)
    chosen = select_frameworks(frameworks)
    names = [name for name in chosen if ws_bench_unsupported(name) is None]
    for name in chosen:
        why = ws_bench_unsupported(name)
        if why is not None and frameworks != "all":
            console.print(f"[yellow]skipped:[/] {name}: {why}")
    missing = {name: FRAMEWORKS[name].missing() for name in names}
    for name, what in missing.items():
        if what:
            console.print(f"[yellow]skipped:[/] {name}: not installed: {', '.join(what)}")
    names = [name for name in names if not missing[name]]
    if not names:
        raise UserError(
            f"bench --ws: none of {', '.join(chosen)} has a minimal WebSocket server installed"
        )
    check_cpus(server_cpus)
    check_cpus(agent_cpus)
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if workers is not None and workers < 1:
        raise UserError("--workers must be 1 or more")
    processes = workers if workers is not None else ws_workers(connections, open_files)
    sockets_max = processes * (open_files - FD_HEADROOM)
    if not WS_BENCH_STEPS * 2 <= connections <= sockets_max:
        raise UserError(
            f"--connections must be {WS_BENCH_STEPS * 2}..{sockets_max:,} with --ws and "
            f"{processes} worker(s) (one server process may open {open_files - FD_HEADROOM:,} "
            "sockets here: the open-files limit; more --workers hold more)"
        )
    if rounds < 2 or hold_s < 1 or (open_rate is not None and open_rate <= 0):
        raise UserError("--ws needs --rounds >= 2, --hold >= 1 s and a positive --open-rate")
    if processes > 1:  # past one process: what plan-connections would refuse, refused
        refusal = _ws_plan_refusal(names, connections, hold_s, open_rate, processes)
        if refusal:
            raise UserError(f"bench --ws: {refusal}")
    results = []
    with contextlib.ExitStack() as stack:
        opened = None
        if fleet is not None:  # Dask's client only when asked for
            from harness.fleet.client import open_fleet

            with console.status(f"bench --ws: connecting to the fleet {fleet}…"):
                opened = stack.enter_context(open_fleet(fleet, server_address, fleet_access))
        for name in names:
            chosen_loop = loop if loop in FRAMEWORKS[name].loops else None
            status = (
                f"bench --ws {name}: {rounds} rounds of ours and minimal, {connections:,} conns"
                f"{f', {processes} workers each' if processes > 1 else ''}…"
            )
            with console.status(status):
                results.append(
                    bench_ws_framework(
                        name,
                        loop=chosen_loop,
                        server_cpus=server_cpus,
                        agent_cpus=agent_cpus,
                        connections=connections,
                        rounds=rounds,
                        hold_s=hold_s,
                        open_rate_per_s=open_rate,
                        workers=processes,
                        fleet=opened,
                    )
                )
            # each framework's figures as it finishes (a 100,000-connection bench runs
            # ~7 minutes a framework): on stderr, so that --json's stdout stays one document
            print(_ws_row_line(results[-1]), file=sys.stderr, flush=True)
    if as_json:
        rows = [{**dataclasses.asdict(r), "note": r.note} for r in results]
        print(json.dumps(rows, indent=2))
        return
    table = Table(
        "framework", "loop", "conns", "workers", "KB/conn ours · minimal",
        "ours / minimal [95 % CI]", "memory", "RSS KB/conn ours · minimal",
        "CPU µs/conn ours · minimal", "ours / minimal [95 % CI]", "CPU", "rounds",
    )  # fmt: skip
    reasons = []
    for r in results:
        table.add_row(
            r.framework,
            r.loop or FRAMEWORKS[r.framework].loops[0],
            f"{r.connections:,}",
            str(r.server_processes),
            f"{_figure(r.memory.ours, '.1f')} · {_figure(r.memory.minimal, '.1f')}",
            _ratio(r.memory.ratio, r.memory.ci),
            _verdict(r.memory.verdict),
            f"{_figure(r.rss.ours, '.1f')} · {_figure(r.rss.minimal, '.1f')}",
            f"{_figure(r.cpu.ours, ',.0f')} · {_figure(r.cpu.minimal, ',.0f')}",
            _ratio(r.cpu.ratio, r.cpu.ci),
            _verdict(r.cpu.verdict),
            str(r.rounds),
        )
        for what, figure in (("memory", r.memory), ("CPU", r.cpu)):
            if figure.reason:
                reasons.append(f"{r.framework} {what} undecided: {figure.reason}")
    console.print(table)
    sources = {(r.memory_source, r.cpu_source) for r in results}
    for memory_source, cpu_source in sorted(sources):
        console.print(
            f"KB/conn: the {'cgroup memory' if memory_source == 'cgroup' else 'RSS'} slope over "
            f"the held steps; CPU: the {cpu_source}'s, from the first connection to the top "
            "step, per connection opened (less the app's idle CPU)"
        )
    for load in sorted({r.load for r in results}):
        console.print(f"load: the agents {'here' if load == 'local' else 'on the ' + load}")
    for reason in reasons:
        console.print(f"[yellow]{reason}[/]")


def _ws_row_line(result: WsBenchResult) -> str:
    """One framework's bench --ws figures in a line: KB per connection ours · minimal, the
    ratio with its interval and the verdict, the same for CPU µs per connection."""
    memory, cpu = result.memory, result.cpu
    return (
        f"bench --ws {result.framework}: {result.connections:,} conns, "
        f"KB/conn {_figure(memory.ours, '.1f')} · {_figure(memory.minimal, '.1f')} "
        f"{_ratio(memory.ratio, memory.ci)} {memory.verdict}; "
        f"CPU µs/conn {_figure(cpu.ours, ',.0f')} · {_figure(cpu.minimal, ',.0f')} "
        f"{_ratio(cpu.ratio, cpu.ci)} {cpu.verdict}; {result.rounds} rounds, held at least "
        f"{result.ours_held_min:,} · {result.minimal_held_min:,}"
    )


def _ws_plan_refusal(
    names: list[str], connections: int, hold_s: float, open_rate: float | None, workers: int
) -> str | None:
    """Why this host cannot hold `connections` for the measured ones of `names` (harness
    plan-connections' arithmetic: memory, conntrack), or None."""
    from harness.bench_ws import WS_BENCH_STEPS, ws_ramp
    from harness.connection_plan import SERVER_MEMORY, plan_connections, plan_refusal
    from harness.doctor import connection_host

    ramp = ws_ramp(connections, hold_s, open_rate, workers)
    plan = plan_connections(
        connections,
        [name for name in names if name in SERVER_MEMORY],
        connection_host(),
        open_rate_per_s=ramp.open_rate_per_s,
        ramp_step=max(1, connections // WS_BENCH_STEPS),
        ramp_hold_s=hold_s,
        addresses_per_host=4,
    )
    return plan_refusal(plan)


def _figure(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _ratio(ratio: float | None, ci: tuple[float, float] | None) -> str:
    if ratio is None:
        return "–"
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return f"{ratio:.2f}×{interval}"


def _verdict(word: str) -> str:
    return {"within": "[green]≤ 1.25×[/]", "above": "[red]above 1.25×[/]"}.get(
        word, "[yellow]undecided[/]"
    )

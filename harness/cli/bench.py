"""`harness bench`: our server against the framework's minimal app, same core, same run."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from harness.cli.options import (
    AGENT_CPUS_OPTION,
    PROTOCOL_OPTION,
    SERVER_OPTION,
    SERVERS_FILE_OPTION,
    TLS_CERT_OPTION,
    TLS_KEY_OPTION,
    check_cpus,
    console,
)
from model.errors import UserError
from servers import FRAMEWORKS


def bench_command(
    frameworks: str = typer.Option("all", help="all, or a comma-separated list of frameworks."),
    loop: str = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado."),
    server_cpus: str = typer.Option("0", help="CPUs for the servers."),
    load_cpus: str = typer.Option("1", help="CPUs for wrk."),
    agent_cpus: str = AGENT_CPUS_OPTION,
    connections: int = typer.Option(100, help="wrk connections."),
    duration_s: float = typer.Option(3.0, "--duration", help="Seconds per wrk run."),
    rounds: int = typer.Option(
        10, help="Rounds (ours and minimal, the order alternating) per framework, at least."
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
) -> None:
    """GET / on our server against the framework's minimal app, same core, same run (wrk).
    A plugin's or a command's server is measured against its `minimal` command; with
    --protocol, both on each protocol (wrk speaks h1 and h1-tls)."""
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

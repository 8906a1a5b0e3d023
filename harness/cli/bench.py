"""`harness bench http` and `harness bench ws`: our server against the framework's minimal
app, same core, same run; each bench is kept as a run under the results root
(harness.bench_record) for history, diff, trend and publish.

`harness bench …` without a subcommand is `bench http` (scripts written before the
subcommands keep working), and `harness bench --ws …` is `bench ws …`.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import typer
from typer.core import TyperGroup

from charts.bench_tables import BENCH_HTTP, BENCH_WS
from charts.cpu_tables import BENCH_CPU_SPLIT, BENCH_PROFILED_CAPTION, bench_profiles
from harness.cli.live_options import LIVE_OPTION, PROMETHEUS_OPTION
from harness.cli.options import (
    AGENT_CPUS_OPTION,
    FLEET_CA_OPTION,
    FLEET_CERT_OPTION,
    FLEET_KEY_OPTION,
    FLEET_OPTION,
    INSECURE_FLEET_OPTION,
    PROTOCOL_OPTION,
    RESULTS_OPTION,
    SERVER_ADDRESS_OPTION,
    SERVER_OPTION,
    SERVERS_FILE_OPTION,
    TLS_CERT_OPTION,
    TLS_KEY_OPTION,
    console,
)
from harness.outputs.console import rich_table
from model.errors import UserError
from servers import FRAMEWORKS

if TYPE_CHECKING:
    from harness.bench import BenchResult
    from harness.bench_record import BenchRecorder
    from harness.bench_runs import (
        HttpBenchOptions,
        HttpBenchPlan,
        WsBenchOptions,
        WsBenchPlan,
    )
    from harness.bench_ws import WsBenchResult
    from harness.live.session import LiveSession
    from harness.run_options import RunOptions
    from model.bench import BenchCase


class BenchGroup(TyperGroup):
    """`bench` with no subcommand named runs `bench http`; `--ws` anywhere runs `bench ws`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["ws" if "--ws" in args else "http", *args]
        if args[0] == "ws":
            args = [arg for arg in args if arg != "--ws"]
        return super().parse_args(ctx, args)


bench_app = typer.Typer(
    cls=BenchGroup,
    rich_markup_mode=None,
    help="Our server against the framework's minimal app, same core, same run: `bench http` "
    "(GET /, wrk; the default) or `bench ws` (idle WebSocket connections; `bench --ws` too). "
    "Each bench is kept under --results for history, diff, trend and publish.",
)

FRAMEWORKS_OPTION = typer.Option("all", help="all, or a comma-separated list of frameworks.")
LOOP_OPTION = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado.")
SERVER_CPUS_OPTION = typer.Option("0", help="CPUs for the servers.")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _common(**shared: Any) -> RunOptions:
    """The options a bench shares with compare, as compare's RunOptions."""
    from harness.run_options import RunOptions

    servers = tuple(shared.pop("servers") or ())
    return RunOptions(**shared, servers=servers)


@bench_app.command("http")
def http_command(
    frameworks: str = FRAMEWORKS_OPTION,
    loop: str = LOOP_OPTION,
    server_cpus: str = SERVER_CPUS_OPTION,
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
    cpu_profile: bool = typer.Option(
        False,
        "--cpu-profile",
        help="After the rounds, one more run of each app with a CPU sampler on it (out of "
        "the ratio): where its CPU µs per request go.",
    ),
    as_json: bool = JSON_OPTION,
    results: Path = RESULTS_OPTION,
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    protocol: str = PROTOCOL_OPTION,
    tls_cert: Path = TLS_CERT_OPTION,
    tls_key: Path = TLS_KEY_OPTION,
    live_address: str = LIVE_OPTION,
    prometheus_address: str = PROMETHEUS_OPTION,
    # WebSocket-only options given here are refused by name, not as unknown
    workers: int = typer.Option(None, "--workers", hidden=True),
    fleet: str = typer.Option(None, "--fleet", hidden=True),
) -> None:
    """GET / on our server against the framework's minimal app, same core, same run (wrk),
    in rounds until the ratio ours / minimal is within --precision; verdict: ≥ 0.95×. A
    plugin's or a command's server is measured against its `minimal` command; with
    --protocol, both on each protocol (wrk speaks h1 and h1-tls). Kept under --results."""
    from harness.bench_runs import HttpBenchOptions

    if workers is not None or fleet is not None:
        raise UserError("--workers and --fleet go with --ws (GET / runs one process, wrk here)")
    common = _common(
        frameworks=frameworks, loop=loop, server_cpus=server_cpus,
        load_cpus=agent_cpus or load_cpus, results_dir=results, servers=servers,
        servers_file=servers_file, protocol=protocol, tls_cert=tls_cert, tls_key=tls_key,
        live_address=live_address, prometheus_address=prometheus_address,
    )  # fmt: skip
    options = HttpBenchOptions(
        common, connections, rounds, duration_s, precision_pct, max_time_s, max_rounds,
        cpu_profile,
    )  # fmt: skip
    bench_http(options, as_json=as_json)


def bench_http(options: HttpBenchOptions, *, as_json: bool) -> Path:
    """Bench every chosen framework over HTTP, keep the run, print it; returns its directory.
    With `--live` / `--prometheus`, each run and round shown as it goes (harness.bench_live)."""
    from harness.bench_live import live_bench
    from harness.bench_runs import plan_http_bench

    plan = plan_http_bench(options)
    for line in plan.skipped:
        console.print(f"[yellow]skipped:[/] {line}")
    if not plan.pairs:
        raise UserError(f"nothing to bench on {', '.join(plan.protocols)}: see the reasons above")
    common = options.common
    with live_bench(common.live_address, common.prometheus_address, _say) as live:
        recorder = _http_results(plan, live, as_json=as_json)
    return recorder.directory


def _say(line: str) -> None:
    console.print(line, highlight=False)


def _http_results(plan: HttpBenchPlan, live: LiveSession | None, *, as_json: bool) -> BenchRecorder:
    """Measure, then print the figures (a table, or JSON) and where they were kept."""
    recorder, results = _measure_http(plan, live)
    if as_json:
        rows = [
            {**r.__dict__, "half_width_pct": r.half_width_pct, "verdict": case.figures[0].verdict}
            for r, case in zip(results, recorder.run.cases, strict=True)
        ]
        print(json.dumps(rows, indent=2))
    else:
        console.print(rich_table(BENCH_HTTP.render(recorder.run.cases, "compact")))
        if any("cpu_profile" in case.details for case in recorder.run.cases):
            rows = bench_profiles(recorder.run.cases)
            console.print(rich_table(BENCH_CPU_SPLIT.render(rows, "compact")))
            _say(BENCH_PROFILED_CAPTION)
    _say_kept(recorder, as_json)
    return recorder


def _measure_http(
    plan: HttpBenchPlan, live: LiveSession | None
) -> tuple[BenchRecorder, list[BenchResult]]:
    from harness.bench import bench_framework
    from harness.bench_live import BenchWatch, bench_reporter
    from harness.bench_record import http_case, recording
    from harness.tls import run_certificates

    options, common = plan.options, plan.options.common
    what = (
        f"≥ {options.rounds} rounds to ±{options.precision_pct:g} %"
        if options.precision_pct
        else f"{options.rounds} rounds"
    )
    names = list(dict.fromkeys(name for name, _ in plan.pairs))
    results = []
    with (
        recording(common.results_dir, "http", options.config(), names) as recorder,
        run_certificates(plan.protocols, common.tls_cert, common.tls_key) as certificates,
    ):
        reporter = bench_reporter(
            live, run_id=recorder.run_id, profile=recorder.run.profile, frameworks=names,
            cases_total=2 * options.rounds * len(plan.pairs), round_s=options.duration_s,
        )  # fmt: skip
        rounds_max = options.max_rounds if options.precision_pct else options.rounds
        for name, protocol in plan.pairs:
            watch = (
                None
                if reporter is None
                else BenchWatch(
                    reporter, name, protocol, rounds_max, at_most=bool(options.precision_pct)
                )
            )
            with console.status(
                f"bench {name} ({protocol}): {what} of 2 × {options.duration_s:g} s…"
            ):
                result = bench_framework(
                    name,
                    loop=common.loop if common.loop in FRAMEWORKS[name].loops else None,
                    server_cpus=common.server_cpus, load_cpus=common.load_cpus,
                    connections=options.connections, duration_s=options.duration_s,
                    rounds=options.rounds, precision_pct=options.precision_pct or None,
                    max_rounds=options.max_rounds, max_time_s=options.max_time_s or None,
                    protocol=protocol, certificates=certificates, watch=watch,
                    profile_dir=recorder.directory / f"{name}-{protocol}-profiled"
                    if options.cpu_profile else None,
                )  # fmt: skip
            results.append(result)
            recorder.add(http_case(result))
    return recorder, results


def _say_kept(recorder: BenchRecorder, as_json: bool) -> None:
    """Where the run went: on stderr with --json (its stdout stays one document)."""
    profile = recorder.run.profile
    line = f"kept: {recorder.directory} (harness history, diff, trend --profile {profile})"
    if as_json:
        print(line, file=sys.stderr)
    else:
        console.print(line, highlight=False)


@bench_app.command("ws")
def ws_command(
    frameworks: str = FRAMEWORKS_OPTION,
    loop: str = LOOP_OPTION,
    server_cpus: str = SERVER_CPUS_OPTION,
    load_cpus: str = typer.Option("1", help="CPUs for the agents."),
    agent_cpus: str = AGENT_CPUS_OPTION,
    connections: int = typer.Option(
        None, help="Idle WebSocket connections at the top step (15,000).", show_default=False
    ),
    rounds: int = typer.Option(
        None,
        help="Rounds (ours and minimal, the order alternating) per framework (3).",
        show_default=False,
    ),
    hold_s: float = typer.Option(3.0, "--hold", help="Seconds each of the 5 steps is held."),
    open_rate: float = typer.Option(
        None,
        "--open-rate",
        help="Connections opened per second (default: the top step in 10 s, at most 1,500 a "
        "second; 800 past one process).",
        show_default=False,
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        help="Processes of each app on its port (default: one, or as many as --connections "
        "need past one process's open files).",
        show_default=False,
    ),
    as_json: bool = JSON_OPTION,
    results: Path = RESULTS_OPTION,
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    protocol: str = typer.Option(None, "--protocol", help="h1 only (the default)."),
    fleet: str = FLEET_OPTION,
    server_address: str = SERVER_ADDRESS_OPTION,
    fleet_ca: Path = FLEET_CA_OPTION,
    fleet_cert: Path = FLEET_CERT_OPTION,
    fleet_key: Path = FLEET_KEY_OPTION,
    insecure_fleet: bool = INSECURE_FLEET_OPTION,
    live_address: str = LIVE_OPTION,
    prometheus_address: str = PROMETHEUS_OPTION,
) -> None:
    """Idle WebSocket connections (the agent, ramped in 5 steps up to --connections) on our
    server and on the runtime's minimal WebSocket server (servers/minimal), each started
    afresh per round in a cgroup of its own on the server CPUs: KB per connection (the
    slope of the cgroup's memory over the steps; RSS beside it), CPU µs per opened
    connection, and ours / minimal with a 95 % interval and a verdict against 1.25×. Past
    one process's open files both apps run as --workers on one port; --fleet runs the
    agents on a fleet's load hosts (local:N: namespaces here). Kept under --results."""
    from harness.bench_runs import WsBenchOptions
    from harness.fleet.client import FleetAccess

    if protocol and protocol != "h1":
        raise UserError("bench --ws measures WebSockets over cleartext HTTP/1.1 (h1) only")
    access = FleetAccess(
        str(fleet_ca) if fleet_ca else None,
        str(fleet_cert) if fleet_cert else None,
        str(fleet_key) if fleet_key else None,
        insecure_fleet,
    )
    common = _common(
        frameworks=frameworks, loop=loop, server_cpus=server_cpus,
        load_cpus=agent_cpus or load_cpus, results_dir=results, servers=servers,
        servers_file=servers_file, fleet=fleet, server_address=server_address,
        fleet_access=access, live_address=live_address, prometheus_address=prometheus_address,
    )  # fmt: skip
    bench_ws(
        WsBenchOptions(common, connections, rounds, hold_s, open_rate, workers), as_json=as_json
    )


def bench_ws(options: WsBenchOptions, *, as_json: bool) -> Path:
    """`harness bench ws`: every chosen framework with a minimal WebSocket server, kept
    as a run; returns its directory. With `--live` / `--prometheus`, each app's ramp and
    each round shown as it goes (harness.bench_live)."""
    from harness.bench_live import live_bench
    from harness.bench_runs import plan_ws_bench

    plan = plan_ws_bench(options)
    for line in plan.skipped:
        console.print(f"[yellow]skipped:[/] {line}")
    common = options.common
    with live_bench(common.live_address, common.prometheus_address, _say) as live:
        recorder = _ws_results(plan, live, as_json=as_json)
    return recorder.directory


def _ws_results(plan: WsBenchPlan, live: LiveSession | None, *, as_json: bool) -> BenchRecorder:
    """Measure, then print the figures (a table, or JSON) and where they were kept."""
    recorder, results = _measure_ws(plan, live)
    if as_json:
        rows = [{**dataclasses.asdict(r), "note": r.note} for r in results]
        print(json.dumps(rows, indent=2))
    else:
        _print_ws(results, recorder.run.cases)
    _say_kept(recorder, as_json)
    return recorder


def _measure_ws(
    plan: WsBenchPlan, live: LiveSession | None
) -> tuple[BenchRecorder, list[WsBenchResult]]:
    import contextlib

    from harness.bench_live import BenchWatch, bench_reporter
    from harness.bench_record import recording, ws_case
    from harness.bench_ws import bench_ws_framework

    options, common, processes = plan.options, plan.options.common, plan.processes
    results: list[WsBenchResult] = []
    with (
        recording(common.results_dir, "ws", options.config(processes), plan.names) as recorder,
        contextlib.ExitStack() as stack,
    ):
        opened = None
        if common.fleet is not None:  # Dask's client only when asked for
            from harness.fleet.client import open_fleet

            with console.status(f"bench --ws: connecting to the fleet {common.fleet}…"):
                opened = stack.enter_context(
                    open_fleet(common.fleet, common.server_address, common.fleet_access)
                )
        reporter = bench_reporter(
            live, run_id=recorder.run_id, profile=recorder.run.profile, frameworks=plan.names,
            cases_total=2 * options.rounds * len(plan.names), round_s=None,
        )  # fmt: skip
        for name in plan.names:
            watch = None if reporter is None else BenchWatch(
                reporter, name, "h1", options.rounds, at_most=False, scenario="ws-idle",
                driver="agent",
            )  # fmt: skip
            status = (
                f"bench --ws {name}: {options.rounds} rounds of ours and minimal, "
                f"{options.connections:,} conns"
                f"{f', {processes} workers each' if processes > 1 else ''}…"
            )
            with console.status(status):
                result = bench_ws_framework(
                    name, loop=common.loop if common.loop in FRAMEWORKS[name].loops else None,
                    server_cpus=common.server_cpus, agent_cpus=common.load_cpus,
                    connections=options.connections, rounds=options.rounds, hold_s=options.hold_s,
                    open_rate_per_s=options.open_rate, workers=processes, fleet=opened,
                    watch=watch,
                )  # fmt: skip
            results.append(result)
            recorder.add(ws_case(result))
            # each framework's figures as it finishes (a 100,000-connection bench runs
            # ~7 minutes a framework): on stderr, so that --json's stdout stays one document
            print(_ws_row_line(result), file=sys.stderr, flush=True)
    return recorder, results


def _print_ws(results: list[WsBenchResult], cases: tuple[BenchCase, ...]) -> None:
    """The WebSocket bench's table (charts.bench_tables) and what its figures mean."""
    console.print(rich_table(BENCH_WS.render(cases, "compact")))
    reasons = [
        f"{r.framework} {what} undecided: {figure.reason}"
        for r in results
        for what, figure in (("memory", r.memory), ("CPU", r.cpu))
        if figure.reason
    ]
    for memory_source, cpu_source in sorted({(r.memory_source, r.cpu_source) for r in results}):
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


def _figure(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _ratio(ratio: float | None, ci: tuple[float, float] | None) -> str:
    if ratio is None:
        return "–"
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    return f"{ratio:.2f}×{interval}"

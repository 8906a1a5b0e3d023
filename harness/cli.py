"""The `harness` command line: parses and dispatches only; the work lives in its modules.

A user's mistake raises UserError, caught once in `main()`: one line, exit status 1.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from model.errors import UserError
from servers import FRAMEWORKS, contract
from servers.contract import SINKS

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Compare web-server frameworks fairly: identical load, pinned CPUs, telemetry.",
)
# Not a terminal (CI, a pipe): wide enough that tables keep their columns.
console = Console(width=None if sys.stdout.isatty() else 160)


@app.command("list")
def list_frameworks(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    scenarios: bool = typer.Option(False, "--scenarios", help="List the scenarios instead."),
) -> None:
    """Frameworks and baselines: installed here or not, versions, loops, routes served."""
    if scenarios:
        from model.scenarios import SCENARIOS

        table = Table("scenario", "description")
        for scenario in SCENARIOS.values():
            table.add_row(scenario.name, scenario.description)
        console.print(table)
        return
    rows = [
        {
            "framework": name,
            "role": framework.role,
            "available": framework.available(),
            "missing": framework.missing(),
            "versions": framework.versions(),
            "loops": list(framework.usable_loops()),
            "routes": list(framework.routes),
            "sinks": list(framework.sinks),
        }
        for name, framework in FRAMEWORKS.items()
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("framework", "role", "available", "versions", "loops", "routes")
    for row in rows:
        available = "yes" if row["available"] else f"no (missing {', '.join(row['missing'])})"
        versions = ", ".join(f"{k} {v}" for k, v in row["versions"].items())
        routes = (
            "all" if len(row["routes"]) == len(contract.ALL_ROUTES) else " ".join(row["routes"])
        )
        table.add_row(
            row["framework"], row["role"], available, versions, ", ".join(row["loops"]), routes
        )
    console.print(table)


@app.command()
def doctor(
    install: bool = typer.Option(False, "--install", help="apt-get install missing tools."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Load tools found (with versions) and the limits that bound a run on this machine."""
    from harness.doctor import doctor_report, install_missing

    if install:
        installed = install_missing()
        if not as_json:
            console.print(
                f"installed: {', '.join(installed)}" if installed else "nothing to install"
            )
    report = doctor_report()
    if as_json:
        print(json.dumps(report, indent=2))
        return
    table = Table("tool", "package", "version", "path")
    ferretdb = report["ferretdb"]
    for tool in report["tools"].values():  # type: ignore[union-attr]
        table.add_row(
            tool["name"], tool["package"], tool["version"] or "[red]missing[/]", tool["path"] or ""
        )
    table.add_row(
        "ferretdb", "go module", ferretdb["version"] or "[red]missing[/]", ferretdb["path"] or ""
    )  # type: ignore[index]
    console.print(table)
    probe = ferretdb["w0_probe"]  # type: ignore[index]
    if probe:
        console.print(
            f"FerretDB with w: 0 (unacknowledged writes): {probe['stored']} of {probe['sent']} "
            f"stored after the client disconnected — {probe['lost']} lost"
            + (" (use --mongo-w 1, or --mongo-url to a real MongoDB)" if probe["lost"] else "")
        )
    host = report["host"]
    limits = Table("host fact", "value")
    for key, value in host.items():  # type: ignore[union-attr]
        limits.add_row(key, str(value))
    console.print(limits)


def _parse_sinks(spec: str) -> list[str]:
    sinks = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in sinks if s not in SINKS]
    if unknown or not sinks:
        raise UserError(
            f"unknown sink {', '.join(unknown) or repr(spec)}: choose from {', '.join(SINKS)}"
        )
    return sinks


def _check_cpus(spec: str) -> str:
    from harness.affinity import parse_cpu_list

    parse_cpu_list(spec)
    return spec


@app.command()
def verify(
    frameworks: str = typer.Option("all", help="all, or a comma-separated list of frameworks."),
    sinks: str = typer.Option("empty", help="Comma-separated sinks to verify with."),
    server_cpus: str = typer.Option(None, help="Pin each server to these CPUs (e.g. 0)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    backends: bool = typer.Option(
        True, help="Also check /files, /gridfs, /mc and the memcached socket service."
    ),
    mongo_url: str = typer.Option(None, help="A real MongoDB (default: FerretDB started here)."),
) -> None:
    """Start each server and check every route it serves, WebSocket rules, latency and
    the sinks asked for; routes a baseline does not serve are `not supported`. Exit 1 on
    a failure."""
    from harness.frameworks import select_frameworks
    from harness.verify import verify_backends, verify_framework

    names = select_frameworks(frameworks)
    sink_names = _parse_sinks(sinks)
    cpus = _check_cpus(server_cpus) if server_cpus else None
    results = []
    with contextlib.ExitStack() as stack:
        services = None
        if backends:
            with console.status("starting FerretDB and memcached for the backend checks…"):
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory()))
                services = stack.enter_context(verify_backends(workdir, mongo_url))
        for name in names:
            for sink in sink_names:
                with console.status(f"verifying {name} ({sink} sink)…", spinner="dots"):
                    results.append(
                        verify_framework(
                            name, sink, cpus=cpus, mongo_url=mongo_url, backends=services
                        )
                    )
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        table = Table("framework", "sink", "check", "ok", "detail")
        for result in results:
            if result.skipped:
                table.add_row(
                    result.framework, result.sink, "-", "[yellow]skipped[/]", result.skipped
                )
            if result.error:
                table.add_row(result.framework, result.sink, "start", "[red]FAIL[/]", result.error)
            for check in result.checks:
                mark = "[green]ok[/]" if check.ok else "[red]FAIL[/]"
                if not check.supported:
                    mark = "[dim]not supported[/]"
                table.add_row(result.framework, result.sink, check.name, mark, check.detail)
        console.print(table)
        passed = sum(r.ok for r in results if not r.skipped)
        skipped = sum(bool(r.skipped) for r in results)
        console.print(f"{passed} of {len(results) - skipped} passed, {skipped} not offered")
    if not all(r.ok for r in results if not r.skipped):
        raise typer.Exit(1)


@app.command()
def bench(
    frameworks: str = typer.Option("all", help="all, or a comma-separated list of frameworks."),
    loop: str = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado."),
    server_cpus: str = typer.Option("0", help="CPUs for the servers."),
    load_cpus: str = typer.Option("1", help="CPUs for wrk."),
    connections: int = typer.Option(100, help="wrk connections."),
    duration_s: float = typer.Option(10.0, "--duration", help="Seconds per wrk run."),
    rounds: int = typer.Option(3, help="Alternating rounds (ours, minimal) per framework."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """GET / on our server against the framework's minimal app, same core, same run (wrk)."""
    from harness.bench import bench_framework
    from harness.doctor import tool_path
    from harness.frameworks import select_frameworks

    # baselines have no minimal app: bench measures our server against the framework's own
    names = [n for n in select_frameworks(frameworks) if FRAMEWORKS[n].role == "framework"]
    if not names:
        raise UserError("bench compares frameworks with their minimal apps; baselines have none")
    _check_cpus(server_cpus)
    _check_cpus(load_cpus)
    if tool_path("wrk") is None:
        raise UserError("wrk not found: run `harness doctor --install`")
    results = []
    for name in names:
        chosen_loop = loop if loop in FRAMEWORKS[name].loops else None
        with console.status(f"bench {name}: {rounds} rounds of {duration_s:g} s each…"):
            results.append(
                bench_framework(
                    name,
                    loop=chosen_loop,
                    server_cpus=server_cpus,
                    load_cpus=load_cpus,
                    connections=connections,
                    duration_s=duration_s,
                    rounds=rounds,
                )
            )
    if as_json:
        print(json.dumps([{**r.__dict__, "ratio": r.ratio} for r in results], indent=2))
        return
    table = Table("framework", "loop", "ours req/s", "minimal req/s", "ours / minimal")
    for r in results:
        table.add_row(
            r.framework,
            r.loop or FRAMEWORKS[r.framework].loops[0],
            f"{r.ours_requests_per_s:,.0f}",
            f"{r.minimal_requests_per_s:,.0f}",
            f"{r.ratio:.0%}",
        )
    console.print(table)


def _compare(
    *,
    frameworks: str,
    profile: str,
    scenario: str | None,
    sink: str | None,
    driver: str | None,
    repeat: int | None,
    duration_s: float | None,
    affinity: str | None,
    process_model: str | None,
    loop: str | None,
    settings: list[str],
    server_cpus: str | None,
    agent_cpus: str | None,
    out: Path | None,
    no_verify: bool,
    mongo_url: str | None,
    mongo_w: int | None,
    connections: int | None,
    mode: str | None,
) -> None:
    from harness.compare import build_plan, run_plan, summary_table, topology_table
    from harness.profile import parse_settings

    overrides = {
        **parse_settings(settings),
        "scenario": scenario,
        "sink": sink,
        "driver": driver,
        "repeat": repeat,
        "duration_s": duration_s,
        "affinity": affinity,
        "process_model": process_model,
        "loop": loop,
        "mongo_w": mongo_w,
        "connections": connections,
        "mode": mode,
    }
    plan = build_plan(
        frameworks=frameworks,
        profile_name=profile,
        overrides=overrides,
        server_cpus=server_cpus,
        agent_cpus=agent_cpus,
        out=out,
        verify=not no_verify,
        mongo_url=mongo_url,
    )
    console.print(
        f"profile {plan.profile.name}: {plan.profile.description}\n"
        f"frameworks {', '.join(plan.frameworks)}; server CPUs {plan.server_cpus}, "
        f"load CPUs {plan.agent_cpus}; results {plan.out_dir}"
    )
    try:
        run, wall_s = run_plan(plan, console)
    except KeyboardInterrupt:
        print(f"harness: interrupted; finished cases kept in {plan.out_dir}", file=sys.stderr)
        raise SystemExit(130) from None
    console.print(summary_table(run))
    for note in dict.fromkeys(c.summary.limit_note for c in run.cases if c.summary.limit_note):
        console.print(f"[yellow]note:[/] {note}")
    topologies = topology_table(run)
    if topologies is not None:
        console.print(topologies)
    from charts.render import render

    with console.status("drawing charts and the report…"):
        report_path = render([plan.out_dir])
    console.print(f"wall time {wall_s:.0f} s; results: {plan.out_dir / 'run.json'}")
    console.print(f"report: {report_path}")
    if not any(case.status == "ok" for case in run.cases):
        raise typer.Exit(1)


FRAMEWORKS_OPTION = typer.Option(
    "all", help="all, baselines, or a comma-separated list of frameworks and baselines."
)
PROFILE_OPTION = typer.Option("quick", help="A shipped profile (harness/profiles/*.toml).")
SCENARIO_OPTION = typer.Option(
    None, help="Override the profile's scenario (see `harness list --scenarios`)."
)
SINK_OPTION = typer.Option(None, help="Override the sink (empty, file, mongo).")
DRIVER_OPTION = typer.Option(None, help="Override the driver (wrk, httperf, ab, siege, mcload).")
REPEAT_OPTION = typer.Option(None, help="Run every case N times, interleaved; medians kept.")
DURATION_OPTION = typer.Option(None, "--duration", help="Seconds per step.")
AFFINITY_OPTION = typer.Option(None, help="both, server, agent, none, or matrix (all four).")
MODEL_OPTION = typer.Option(
    None,
    "--process-model",
    help="single, workers:N, lb:N or lb:N/workers:M; a comma-separated list compares several.",
)
LOOP_OPTION = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado.")
SET_OPTION = typer.Option([], "--set", help="Profile override key=value (ramp.stop=100).")
SERVER_CPUS_OPTION = typer.Option(None, help="CPUs for the server (default: the first).")
AGENT_CPUS_OPTION = typer.Option(None, help="CPUs for the load generator (default: the rest).")
OUT_OPTION = typer.Option(None, help="Results directory (default: results/).")
NO_VERIFY_OPTION = typer.Option(False, "--no-verify", help="Skip the verify pass.")
MONGO_URL_OPTION = typer.Option(None, help="A real MongoDB (default: FerretDB started here).")
MONGO_W_OPTION = typer.Option(None, help="Write concern of the mongo sink: 0 or 1.")
CONNECTIONS_OPTION = typer.Option(None, help="Connection ramp target (WebSocket scenarios).")
MODE_OPTION = typer.Option(
    None, help="Connection ramps: load (hold each step) or stress (stop at the breaking point)."
)


@app.command()
def compare(
    frameworks: str = FRAMEWORKS_OPTION,
    profile: str = PROFILE_OPTION,
    scenario: str = SCENARIO_OPTION,
    sink: str = SINK_OPTION,
    driver: str = DRIVER_OPTION,
    repeat: int = REPEAT_OPTION,
    duration_s: float = DURATION_OPTION,
    affinity: str = AFFINITY_OPTION,
    process_model: str = MODEL_OPTION,
    loop: str = LOOP_OPTION,
    settings: list[str] = SET_OPTION,
    server_cpus: str = SERVER_CPUS_OPTION,
    agent_cpus: str = AGENT_CPUS_OPTION,
    out: Path = OUT_OPTION,
    no_verify: bool = NO_VERIFY_OPTION,
    mongo_url: str = MONGO_URL_OPTION,
    mongo_w: int = MONGO_W_OPTION,
    connections: int = CONNECTIONS_OPTION,
    mode: str = MODE_OPTION,
) -> None:
    """Identical load ramps against every framework; run.json, steps.csv, charts, report."""
    _compare(**locals())


@app.command("run")
def run_one(
    framework: str = typer.Option(..., help="The framework to run."),
    profile: str = PROFILE_OPTION,
    scenario: str = SCENARIO_OPTION,
    sink: str = SINK_OPTION,
    driver: str = DRIVER_OPTION,
    repeat: int = REPEAT_OPTION,
    duration_s: float = DURATION_OPTION,
    affinity: str = AFFINITY_OPTION,
    process_model: str = MODEL_OPTION,
    loop: str = LOOP_OPTION,
    settings: list[str] = SET_OPTION,
    server_cpus: str = SERVER_CPUS_OPTION,
    agent_cpus: str = AGENT_CPUS_OPTION,
    out: Path = OUT_OPTION,
    no_verify: bool = NO_VERIFY_OPTION,
    mongo_url: str = MONGO_URL_OPTION,
    mongo_w: int = MONGO_W_OPTION,
    connections: int = CONNECTIONS_OPTION,
    mode: str = MODE_OPTION,
) -> None:
    """One framework through a profile (the same as compare --frameworks NAME)."""
    if "," in framework or framework == "all":
        raise UserError("run takes one framework; use compare for several")
    options = dict(locals())
    _compare(frameworks=options.pop("framework"), **options)


@app.command()
def report(
    run_dirs: list[Path] = typer.Argument(..., help="results/<run-id> directories."),
    out: Path = typer.Option(None, help="Where overlaid figures go (default: first run/overlay)."),
) -> None:
    """Re-draw a run's charts and report.html; several runs are overlaid (same host only)."""
    from charts.render import render

    with console.status("drawing charts and the report…"):
        path = render(run_dirs, out)
    console.print(f"report: {path}")


def main() -> None:
    """Console-script entry: run the app; a UserError becomes one line and exit status 1."""
    try:
        app()  # usage errors: typer's own message and exit status 2
    except UserError as error:
        print(f"harness: error: {error}", file=sys.stderr)
        sys.exit(1)

"""`harness compare`: identical load ramps against every framework (and `run`'s work too).

Its options are declared once, in compare_command's signature; `harness run` reuses that
signature (harness.cli.run). They become one RunOptions (harness.run_options, which
writes down their precedence: defaults < profile < --set < named options)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from charts.tables import pinning_text
from harness.cli.live_options import LIVE_OPTION, PROMETHEUS_OPTION
from harness.cli.options import (
    AFFINITY_OPTION,
    AGENT_CPUS_OPTION,
    CONNECTIONS_OPTION,
    CPU_PROFILE_OPTION,
    CPU_QUOTA_OPTION,
    DB_CPUS_OPTION,
    DRIVER_OPTION,
    DURABLE_OPTION,
    DURATION_OPTION,
    FLEET_CA_OPTION,
    FLEET_CERT_OPTION,
    FLEET_KEY_OPTION,
    FLEET_OPTION,
    FRAMEWORK_ALIAS_OPTION,
    FRAMEWORKS_OPTION,
    INSECURE_FLEET_OPTION,
    JUNIT_OPTION,
    LOAD_CPUS_OPTION,
    LOOP_OPTION,
    MARKDOWN_OPTION,
    MAX_TIME_OPTION,
    MEMORY_MAX_OPTION,
    MODE_OPTION,
    MODEL_OPTION,
    MONGO_BACKEND_OPTION,
    MONGO_BATCH_OPTION,
    MONGO_URL_OPTION,
    MONGO_W_OPTION,
    NO_VERIFY_OPTION,
    OUT_ALIAS_OPTION,
    PRECISION_OPTION,
    PROFILE_OPTION,
    PROTOCOL_OPTION,
    REPEAT_OPTION,
    RESULTS_ROOT_OPTION,
    SCENARIO_OPTION,
    SERVER_ADDRESS_OPTION,
    SERVER_CPUS_OPTION,
    SERVER_OPTION,
    SERVERS_FILE_OPTION,
    SET_OPTION,
    SINK_OPTION,
    STRICT_VERIFY_OPTION,
    THRESHOLD_OPTION,
    TLS_CERT_OPTION,
    TLS_KEY_OPTION,
    console,
)
from model.ramps import ramps_text

if TYPE_CHECKING:
    from harness.run_options import RunOptions
    from model.results import Run


def run_comparison(options: RunOptions, *, command: str = "compare") -> None:
    """Plan (every choice checked up front), run, print the tables, draw the report;
    with `options.junit` / `options.markdown`, write those too (harness.outputs); with
    `options.live_address` / `prometheus_address`, serve the live page / the metrics
    while it runs (harness.live).

    Exit status 1 when no case ran, else 3 when a threshold failed (after everything is
    written and drawn), else 0."""
    from rich.markup import escape

    from harness.compare import build_plan, mongo_backend_note, run_plan
    from harness.lifecycle import interrupt_exit_status, interrupt_reason
    from harness.live.session import start_live
    from harness.outputs.console import print_run_tables, print_verdict, summary_table
    from model.results import read_run
    from model.thresholds import parse_threshold, unmatched

    # the ports taken before anything starts, their URLs said first once the plan is made
    live = start_live(options.live_address, options.prometheus_address)
    plan = build_plan(options)
    if live is not None:
        live.announce(console.print)
    console.print(
        f"profile {plan.profile.name}: {plan.profile.description}\n"
        f"ramp as run: {ramps_text(plan.profile.ramp, plan.profile.connection_ramp)}\n"
        f"frameworks {', '.join(plan.frameworks)}; "
        f"{pinning_text(plan.profile.affinity, plan.server_cpus, plan.load_cpus)}; "
        f"results {plan.out_dir}" + (f"\nload from the fleet {plan.fleet}" if plan.fleet else "")
    )
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")
    backend_note = mongo_backend_note(plan, options.mongo_backend)
    if backend_note is not None:
        console.print(f"[yellow]note:[/] {backend_note}")
    try:
        run, wall_s = run_plan(plan, console, live)
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM or SIGHUP: everything is stopped
        if live is not None:  # the pages say so, then the servers stop
            live.interrupted()
        with contextlib.suppress(Exception):  # after a hang-up there may be no terminal
            console.print(summary_table(read_run(plan.out_dir), console.width))
        with contextlib.suppress(OSError):
            print(
                f"harness: interrupted ({interrupt_reason(error)}); finished cases kept in "
                f"{plan.out_dir}",
                file=sys.stderr,
            )
        raise SystemExit(interrupt_exit_status(error)) from None
    print_run_tables(console, run)
    rules = [parse_threshold(rule) for rule in plan.profile.thresholds]
    for rule in unmatched(rules, run.cases):  # a framework not in this run: nothing to judge
        text = escape(rule.text)  # `aiohttp[h1-tls]: …` is a rule, not rich markup
        console.print(f"[yellow]note:[/] threshold '{text}' matched no case in this run")
    from charts.render import render

    with console.status("drawing charts and the report…"):
        report_path = render([plan.out_dir])
    console.print(f"wall time {wall_s:.0f} s; results: {plan.out_dir / 'run.json'}")
    console.print(f"report: {report_path}")
    if live is not None:
        live.finished(run.status, report_path)
    write_ci_outputs(
        run, plan.out_dir, junit=options.junit, markdown=options.markdown, command=command
    )
    print_verdict(console, run)  # last: the line a reader of the log looks for
    if live is not None:  # the pages told the run's end (at a terminal: kept up till Enter)
        live.end(console.print)
    if not any(case.status == "ok" for case in run.cases):
        raise typer.Exit(1)
    failed = [t for t in run.thresholds if not t.held]
    if failed:
        console.print(f"[red]{len(failed)} of {len(run.thresholds)} threshold checks failed[/]")
        raise typer.Exit(3)


def write_ci_outputs(
    run: Run, run_dir: Path, *, junit: Path | None, markdown: Path | None, command: str
) -> None:
    """The run as JUnit XML and as Markdown, where asked for; each path printed."""
    from harness.outputs import write_output
    from harness.outputs.junit import run_junit
    from harness.outputs.markdown import run_markdown

    if junit is not None:
        write_output(junit, run_junit(run, command), "--junit")
        console.print(f"junit: {junit}")
    if markdown is not None:
        text = run_markdown(run, run_dir, base=markdown.resolve().parent)
        write_output(markdown, text, "--markdown")
        console.print(f"markdown: {markdown}")


def compare_command(
    frameworks: str = FRAMEWORKS_OPTION,
    framework: str = FRAMEWORK_ALIAS_OPTION,
    profile: str = PROFILE_OPTION,
    scenario: str = SCENARIO_OPTION,
    sink: str = SINK_OPTION,
    driver: str = DRIVER_OPTION,
    repeat: int = REPEAT_OPTION,
    duration_s: float = DURATION_OPTION,
    affinity: str = AFFINITY_OPTION,
    process_model: str = MODEL_OPTION,
    protocol: str = PROTOCOL_OPTION,
    loop: str = LOOP_OPTION,
    settings: list[str] = SET_OPTION,
    server_cpus: str = SERVER_CPUS_OPTION,
    load_cpus: str = LOAD_CPUS_OPTION,
    agent_cpus: str = AGENT_CPUS_OPTION,
    results_dir: Path = RESULTS_ROOT_OPTION,
    out: Path = OUT_ALIAS_OPTION,
    no_verify: bool = NO_VERIFY_OPTION,
    strict_verify: bool = STRICT_VERIFY_OPTION,
    mongo_url: str = MONGO_URL_OPTION,
    mongo_backend: str = MONGO_BACKEND_OPTION,
    db_cpus: str = DB_CPUS_OPTION,
    mongo_w: int = MONGO_W_OPTION,
    mongo_batch: int = MONGO_BATCH_OPTION,
    durable: bool = DURABLE_OPTION,
    connections: int = CONNECTIONS_OPTION,
    mode: str = MODE_OPTION,
    thresholds: list[str] = THRESHOLD_OPTION,
    precision_pct: float = PRECISION_OPTION,
    max_time_s: float = MAX_TIME_OPTION,
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    fleet: str = FLEET_OPTION,
    server_address: str = SERVER_ADDRESS_OPTION,
    fleet_ca: Path = FLEET_CA_OPTION,
    fleet_cert: Path = FLEET_CERT_OPTION,
    fleet_key: Path = FLEET_KEY_OPTION,
    insecure_fleet: bool = INSECURE_FLEET_OPTION,
    tls_cert: Path = TLS_CERT_OPTION,
    tls_key: Path = TLS_KEY_OPTION,
    junit: Path = JUNIT_OPTION,
    markdown: Path = MARKDOWN_OPTION,
    cpu_quota: float = CPU_QUOTA_OPTION,
    memory_max: str = MEMORY_MAX_OPTION,
    live_address: str = LIVE_OPTION,
    prometheus_address: str = PROMETHEUS_OPTION,
    cpu_profile: bool = CPU_PROFILE_OPTION,
) -> None:
    """Identical load ramps against every framework; run.json, steps.csv, charts, report."""
    run_comparison(run_options(locals()), command="compare")


def run_options(params: dict[str, Any]) -> RunOptions:
    """The RunOptions of compare's parameters (`harness run` has the same): they are named
    as its fields, but for the command line's own spellings folded in here: `--set`'s
    pairs, --no-verify, the hidden old names (--framework, --out, --agent-cpus), the
    fleet's access, and --durable left off (None: not given, so `--set durable=true`
    holds)."""
    from harness.fleet.client import FleetAccess
    from harness.profile import parse_settings
    from harness.run_options import DEFAULT_RESULTS_DIR, RunOptions

    given = dict(params)
    framework, out, agent_cpus = (given.pop(name) for name in ("framework", "out", "agent_cpus"))
    verify = not given.pop("no_verify")
    paths = [given.pop(name) for name in ("fleet_ca", "fleet_cert", "fleet_key")]
    access = FleetAccess(*(str(p) if p else None for p in paths), given.pop("insecure_fleet"))
    given.update(
        frameworks=framework or given["frameworks"],
        settings=parse_settings(given["settings"]),
        durable=given["durable"] or None,
        load_cpus=given["load_cpus"] or agent_cpus,
        results_dir=given["results_dir"] or out or DEFAULT_RESULTS_DIR,
    )
    return RunOptions(**given, verify=verify, fleet_access=access)

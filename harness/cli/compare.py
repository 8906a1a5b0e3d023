"""`harness compare`: identical load ramps against every framework (and `run`'s work too)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from harness.cli.options import (
    AFFINITY_OPTION,
    AGENT_CPUS_OPTION,
    CONNECTIONS_OPTION,
    DRIVER_OPTION,
    DURABLE_OPTION,
    DURATION_OPTION,
    FLEET_OPTION,
    FRAMEWORKS_OPTION,
    LOAD_CPUS_OPTION,
    LOOP_OPTION,
    MODE_OPTION,
    MODEL_OPTION,
    MONGO_URL_OPTION,
    MONGO_W_OPTION,
    NO_VERIFY_OPTION,
    OUT_OPTION,
    PROFILE_OPTION,
    REPEAT_OPTION,
    SCENARIO_OPTION,
    SERVER_ADDRESS_OPTION,
    SERVER_CPUS_OPTION,
    SET_OPTION,
    SINK_OPTION,
    console,
)


def run_comparison(
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
    load_cpus: str | None,
    agent_cpus: str | None,
    out: Path | None,
    no_verify: bool,
    mongo_url: str | None,
    mongo_w: int | None,
    durable: bool,
    connections: int | None,
    mode: str | None,
    fleet: str | None = None,
    server_address: str | None = None,
) -> None:
    """Plan (every choice checked up front), run, print the tables, draw the report."""
    from harness.compare import build_plan, run_plan, summary_table, topology_table
    from harness.lifecycle import interrupt_exit_status, interrupt_reason
    from harness.profile import parse_settings
    from model.results import read_run

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
        "durable": durable or None,  # unset: the profile's own
        "connections": connections,
        "mode": mode,
    }
    plan = build_plan(
        frameworks=frameworks,
        profile_name=profile,
        overrides=overrides,
        server_cpus=server_cpus,
        agent_cpus=load_cpus or agent_cpus,  # --agent-cpus: the old name, still accepted
        out=out,
        verify=not no_verify,
        mongo_url=mongo_url,
        fleet=fleet,
        server_address=server_address,
    )
    console.print(
        f"profile {plan.profile.name}: {plan.profile.description}\n"
        f"frameworks {', '.join(plan.frameworks)}; server CPUs {plan.server_cpus}, "
        f"load CPUs {plan.agent_cpus}; results {plan.out_dir}"
        + (f"\nload from the fleet {plan.fleet}" if plan.fleet else "")
    )
    try:
        run, wall_s = run_plan(plan, console)
    except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM or SIGHUP: everything is stopped
        with contextlib.suppress(Exception):  # after a hang-up there may be no terminal
            console.print(summary_table(read_run(plan.out_dir)))
        with contextlib.suppress(OSError):
            print(
                f"harness: interrupted ({interrupt_reason(error)}); finished cases kept in "
                f"{plan.out_dir}",
                file=sys.stderr,
            )
        raise SystemExit(interrupt_exit_status(error)) from None
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


def compare_command(
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
    load_cpus: str = LOAD_CPUS_OPTION,
    agent_cpus: str = AGENT_CPUS_OPTION,
    out: Path = OUT_OPTION,
    no_verify: bool = NO_VERIFY_OPTION,
    mongo_url: str = MONGO_URL_OPTION,
    mongo_w: int = MONGO_W_OPTION,
    durable: bool = DURABLE_OPTION,
    connections: int = CONNECTIONS_OPTION,
    mode: str = MODE_OPTION,
    fleet: str = FLEET_OPTION,
    server_address: str = SERVER_ADDRESS_OPTION,
) -> None:
    """Identical load ramps against every framework; run.json, steps.csv, charts, report."""
    run_comparison(**locals())

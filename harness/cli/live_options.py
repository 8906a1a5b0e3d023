"""The options of the live page and the Prometheus exporter (harness.live), shared by the
commands that run load, and their value's default when given bare (`--live`)."""

from __future__ import annotations

import typer

from harness.live import DEFAULT_LIVE_PORT, DEFAULT_PROMETHEUS_PORT

LIVE_OPTION = typer.Option(
    None,
    "--live",
    metavar="[[HOST:]PORT]",
    help=f"Serve a live page of the run (alone: port {DEFAULT_LIVE_PORT}; 0: a port the OS "
    "picks), on 127.0.0.1 unless HOST names another address (warned). Its URL is printed "
    "first.",
)
PROMETHEUS_OPTION = typer.Option(
    None,
    "--prometheus",
    metavar="[[HOST:]PORT]",
    help="Publish the run's samples as Prometheus metrics on /metrics (alone: port "
    f"{DEFAULT_PROMETHEUS_PORT}), on 127.0.0.1 unless HOST names another address (warned).",
)

# a bare option, and the port it stands for
BARE_DEFAULTS = {"--live": str(DEFAULT_LIVE_PORT), "--prometheus": str(DEFAULT_PROMETHEUS_PORT)}


def with_default_ports(argv: list[str]) -> list[str]:
    """`argv` with the default port after a bare `--live` or `--prometheus` (the last
    argument, or one followed by another option): typer's options take a value always."""
    completed: list[str] = []
    for index, argument in enumerate(argv):
        completed.append(argument)
        if argument == "--":
            return completed + argv[index + 1 :]
        following = argv[index + 1] if index + 1 < len(argv) else None
        if argument in BARE_DEFAULTS and (following is None or following.startswith("-")):
            completed.append(BARE_DEFAULTS[argument])
    return completed

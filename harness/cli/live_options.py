"""The options of the live page and the Prometheus exporter (harness.live), shared by the
commands that run load."""

from __future__ import annotations

import typer

from harness.live import DEFAULT_LIVE_PORT, DEFAULT_PROMETHEUS_PORT

LIVE_OPTION = typer.Option(
    None,
    "--live",
    is_flag=False,
    flag_value=str(DEFAULT_LIVE_PORT),
    metavar="[HOST:]PORT",
    help=f"Serve a live page of the run (alone: port {DEFAULT_LIVE_PORT}; 0: a port the OS "
    "picks), on 127.0.0.1 unless HOST names another address (warned). Its URL is printed "
    "first.",
)
PROMETHEUS_OPTION = typer.Option(
    None,
    "--prometheus",
    is_flag=False,
    flag_value=str(DEFAULT_PROMETHEUS_PORT),
    metavar="[HOST:]PORT",
    help="Publish the run's samples as Prometheus metrics on /metrics (alone: port "
    f"{DEFAULT_PROMETHEUS_PORT}), on 127.0.0.1 unless HOST names another address (warned).",
)

"""`harness run`: one framework through a profile (compare with one framework)."""

from __future__ import annotations

from pathlib import Path

import typer

from harness.cli.compare import run_comparison
from harness.cli.live_options import LIVE_OPTION, PROMETHEUS_OPTION
from harness.cli.options import (
    AFFINITY_OPTION,
    AGENT_CPUS_OPTION,
    CONNECTIONS_OPTION,
    CPU_QUOTA_OPTION,
    DB_CPUS_OPTION,
    DRIVER_OPTION,
    DURABLE_OPTION,
    DURATION_OPTION,
    FLEET_CA_OPTION,
    FLEET_CERT_OPTION,
    FLEET_KEY_OPTION,
    FLEET_OPTION,
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
    OUT_OPTION,
    PRECISION_OPTION,
    PROFILE_OPTION,
    PROTOCOL_OPTION,
    REPEAT_OPTION,
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
)
from model.errors import UserError


def run_command(
    framework: str = typer.Option(..., help="The framework to run."),
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
    out: Path = OUT_OPTION,
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
    live: str = LIVE_OPTION,
    prometheus: str = PROMETHEUS_OPTION,
) -> None:
    """One framework through a profile (the same as compare --frameworks NAME)."""
    if "," in framework or framework == "all":
        raise UserError("run takes one framework; use compare for several")
    options = dict(locals())
    run_comparison(frameworks=options.pop("framework"), command="run", **options)

"""`harness fleet status | up | down | cert`: the load hosts of a Dask fleet, local ones,
and certificates for the members of a fleet on real machines."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from harness.cli.options import (
    FLEET_CA_OPTION,
    FLEET_CERT_OPTION,
    FLEET_KEY_OPTION,
    INSECURE_FLEET_OPTION,
    console,
)
from model.errors import UserError

if TYPE_CHECKING:
    from harness.fleet.client import FleetAccess

fleet_app = typer.Typer(
    no_args_is_help=True,
    help="Load hosts on Dask distributed: list a fleet's hosts; make or remove local ones.",
)

FLEET_OPTION = typer.Option(
    None, "--fleet", help="tls://SCHEDULER:PORT (default: the local fleet, if one is up)."
)
DEFAULT_CA_DIR = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / (
    "harness/fleet"
)


def fleet_status(
    fleet: str | None, access: FleetAccess | None = None
) -> tuple[list[dict[str, object]], str]:
    """Every load host of the fleet with its facts and, when refused, why; and our version."""
    from harness.fleet import local
    from harness.fleet.client import (
        FleetAccess,
        connect,
        list_load_hosts,
        parse_fleet,
        remote_identity,
    )
    from harness.fleet.facts import harness_version

    access = access or FleetAccess()
    spec = parse_fleet(fleet, access) if fleet is not None else None
    if spec is None or spec.scheduler is None:
        state = local.read_state()
        if state is None:
            raise UserError(
                "no local fleet is up: `harness fleet up --hosts N`, or give --fleet "
                "tls://SCHEDULER:PORT"
            )
        address, identity = state.scheduler_address, state.identity()
    else:
        address, identity = spec.scheduler, remote_identity(spec, access)
    client = connect(address, identity)
    try:
        hosts = list_load_hosts(client, tls=identity is not None)
    finally:
        client.close(timeout=5)
    ours = harness_version()
    rows = [
        {"name": h.name, "address": h.address, **h.facts, "refused": h.refusal(ours)} for h in hosts
    ]
    return rows, ours


def status_command(
    fleet: str = FLEET_OPTION,
    fleet_ca: Path = FLEET_CA_OPTION,
    fleet_cert: Path = FLEET_CERT_OPTION,
    fleet_key: Path = FLEET_KEY_OPTION,
    insecure_fleet: bool = INSECURE_FLEET_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """A fleet's load hosts: cores, open files, port range, addresses, tools, harness version."""
    from harness.fleet.client import FleetAccess

    # exit status 1 when a host runs another harness version: a run would refuse it
    access = FleetAccess(
        str(fleet_ca) if fleet_ca else None,
        str(fleet_cert) if fleet_cert else None,
        str(fleet_key) if fleet_key else None,
        insecure_fleet,
    )
    rows, ours = fleet_status(fleet, access)
    if as_json:
        print(json.dumps({"harness": ours, "hosts": rows}, indent=2))
    else:
        table = Table(
            "host", "worker", "cores", "open files", "port range", "addresses", "tools",
            "harness", title=f"load hosts (this harness: {ours})",
        )  # fmt: skip
        for row in rows:
            tools = row["tools"] if isinstance(row["tools"], dict) else {}
            low, high = row["port_range"]  # type: ignore[misc]
            table.add_row(
                str(row["name"]),
                str(row["address"]),
                str(row["cores"]),
                f"{row['nofile_soft']:,}",
                f"{low}-{high}",
                ", ".join(row["addresses"]),  # type: ignore[arg-type]
                ", ".join(f"{k} {v}" for k, v in tools.items()),
                f"[red]refused: {row['refused']}[/]" if row["refused"] else "ok",
            )
        console.print(table)
    if not rows:
        raise UserError("the fleet has no load hosts (workers started with --resources load=1)")
    if any(row["refused"] for row in rows):
        raise typer.Exit(1)


def up_command(
    hosts: int = typer.Option(..., "--hosts", min=1, help="Namespace hosts to make."),
    addresses_per_host: int = typer.Option(
        1, "--addresses-per-host", min=1, help="Source addresses per host (~28,000 ports each)."
    ),
) -> None:
    """(root) N network-namespace load hosts on 198.51.100.0/24, until `harness fleet down`."""
    from harness.fleet.local import fleet_up

    state = fleet_up(hosts, addresses_per_host, detach=True)
    console.print(
        f"{len(state.hosts)} load hosts up: scheduler {state.scheduler_address}; servers "
        f"listen on {state.bridge_address}; use --fleet local:{len(state.hosts)}"
    )
    for host in state.hosts:
        console.print(f"  {host}: {', '.join(state.addresses[host])}")


def down_command() -> None:
    """(root) Stop the local fleet; remove its namespaces, links and state (also after a crash)."""
    from harness.fleet.local import fleet_down

    removed = fleet_down()
    counts = ", ".join(f"{len(items)} {kind}" for kind, items in removed.items())
    console.print(f"local fleet down: removed {counts}")


def cert_command(
    name: str = typer.Argument(
        ..., help="The member: a load host's name (its worker's --name), scheduler, or harness."
    ),
    address: list[str] = typer.Option(
        [], "--address", help="A host name or IP address the member is reached at (repeat)."
    ),
    ca_dir: Path = typer.Option(
        DEFAULT_CA_DIR, "--ca-dir", help="Where the fleet's CA is kept (made on first use)."
    ),
    out: Path = typer.Option(
        None, "--out", help="Where to write NAME.pem, NAME.key and ca.pem (default: --ca-dir)."
    ),
    certified_version: str = typer.Option(
        None,
        "--harness-version",
        help="The harness a load host is certified to run (default: this one's). A host "
        "reporting another is refused, whatever it says of itself.",
    ),
) -> None:
    """A certificate from the fleet's CA for one member of a fleet on real machines."""
    from harness.fleet.facts import harness_version
    from harness.fleet.security import HARNESS_IDENTITY, SCHEDULER_IDENTITY, issue, load_or_make_ca

    ca = load_or_make_ca(ca_dir)
    load_host = name not in (HARNESS_IDENTITY, SCHEDULER_IDENTITY)
    version = (certified_version or harness_version()) if load_host else None
    identity = issue(ca, name, out or ca_dir, *address, harness_version=version)
    console.print(
        f"{name}: {identity.cert_path} (key {identity.key_path}, 0600; CA {identity.ca_path})"
    )
    tls = (
        f"--tls-ca-file {identity.ca_path.name} --tls-cert {identity.cert_path.name} "
        f"--tls-key {identity.key_path.name}"
    )
    env = "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True"
    if name == "scheduler":
        hint = f"{env} dask scheduler --protocol tls {tls}"
    elif name == "harness":
        hint = (
            "harness compare --fleet tls://SCHEDULER:8786 "
            f"--fleet-ca {identity.ca_path} --fleet-cert {identity.cert_path} "
            f"--fleet-key {identity.key_path} ..."
        )
    else:
        hint = (
            f"{env} dask worker tls://SCHEDULER:8786 {tls} --name {name} "
            "--nthreads 1 --resources load=1 --no-nanny"
        )
    console.print(f"use: {hint}", soft_wrap=True)


fleet_app.command("status")(status_command)
fleet_app.command("cert")(cert_command)
fleet_app.command("up")(up_command)
fleet_app.command("down")(down_command)

"""`harness fleet status | up | down`: the load hosts of a Dask fleet, and local ones."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from harness.cli.options import console
from model.errors import UserError

fleet_app = typer.Typer(
    no_args_is_help=True,
    help="Load hosts on Dask distributed: list a fleet's hosts; make or remove local ones.",
)

FLEET_OPTION = typer.Option(
    None, "--fleet", help="tcp://SCHEDULER:PORT (default: the local fleet, if one is up)."
)


def fleet_status(fleet: str | None) -> tuple[list[dict[str, object]], str]:
    """Every load host of the fleet with its facts and, when refused, why; and our version."""
    from harness.fleet import local
    from harness.fleet.client import connect, list_load_hosts, parse_fleet
    from harness.fleet.facts import harness_version

    if fleet is None:
        state = local.read_state()
        if state is None:
            raise UserError("no local fleet is up: give --fleet tcp://SCHEDULER:PORT")
        address = state.scheduler_address
    else:
        spec = parse_fleet(fleet)
        if spec.scheduler is None:
            state = local.read_state()
            if state is None:
                raise UserError("no local fleet is up: `harness fleet up --hosts N` first")
            address = state.scheduler_address
        else:
            address = spec.scheduler
    client = connect(address)
    try:
        hosts = list_load_hosts(client)
    finally:
        client.close(timeout=5)
    ours = harness_version()
    rows = [
        {"name": h.name, "address": h.address, **h.facts, "refused": h.refusal(ours)} for h in hosts
    ]
    return rows, ours


def status_command(
    fleet: str = FLEET_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """A fleet's load hosts: cores, open files, port range, addresses, tools, harness version."""
    # exit status 1 when a host runs another harness version: a run would refuse it
    rows, ours = fleet_status(fleet)
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


fleet_app.command("status")(status_command)
fleet_app.command("up")(up_command)
fleet_app.command("down")(down_command)

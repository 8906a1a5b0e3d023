"""The harness's side of a fleet: connect to a Dask scheduler, find its load hosts, check
them, and say where the server must listen for them to reach it.

A load host is a Dask worker started with the resource `load=1` (its name is the host's
name in results). `--fleet` takes `tcp://SCHEDULER:PORT` (hosts started by hand on real
machines: README) or `local:N` (namespace hosts on this machine, harness.fleet.local: the
fleet `harness fleet up` made, or one made for the run and removed after it).

On connecting, the scheduler is told `allowed_failures = 0`: a task whose worker dies is
failed at once (KilledWorker), never handed to another worker — a load phase must never
silently run twice.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from harness.fleet.facts import harness_version, load_host_facts
from model.errors import UserError

CONNECT_TIMEOUT_S = 15.0
WORKERS_TIMEOUT_S = 60.0
LOAD_RESOURCE = "load"
_LOCAL = re.compile(r"local:(\d+)")


@dataclass(frozen=True)
class FleetSpec:
    """A parsed `--fleet`: a scheduler's address, or N local namespace hosts."""

    text: str
    scheduler: str | None = None  # tcp://host:port
    local_hosts: int | None = None


def parse_fleet(text: str) -> FleetSpec:
    """`local:N` or `tcp://HOST:PORT`; UserError naming a bad one."""
    text = text.strip()
    match = _LOCAL.fullmatch(text)
    if match:
        hosts = int(match.group(1))
        if hosts < 1:
            raise UserError(f"--fleet {text}: a local fleet needs at least one host")
        return FleetSpec(text, local_hosts=hosts)
    parsed = urlparse(text)
    if parsed.scheme == "tcp" and parsed.hostname and parsed.port:
        return FleetSpec(text, scheduler=text)
    raise UserError(f"--fleet {text!r} is not local:N or tcp://SCHEDULER:PORT")


@dataclass(frozen=True)
class LoadHost:
    """One load host: its Dask worker's name and address, and what it reported of itself."""

    name: str
    address: str  # the worker's own address (tcp://198.51.100.10:40123)
    facts: dict[str, Any]

    def refusal(self, ours: str) -> str | None:
        """Why this host may not take part (its harness differs from ours); None if it may."""
        theirs = self.facts.get("harness")
        if theirs != ours:
            return f"runs harness {theirs}, this harness is {ours}"
        return None


def _no_retries(dask_scheduler: Any) -> int:
    # runs on the scheduler: a task whose worker dies fails at once instead of moving on
    dask_scheduler.allowed_failures = 0
    return dask_scheduler.allowed_failures


class Fleet:
    """A connected fleet: the Dask client, its load hosts, and where the server listens."""

    def __init__(
        self, spec: FleetSpec, client: Any, hosts: list[LoadHost], server_address: str
    ) -> None:
        self.spec = spec
        self.client = client
        self.hosts = hosts
        self.server_address = server_address
        self.local = spec.local_hosts is not None

    def present(self) -> set[str]:
        """Addresses of the workers the scheduler knows now; UserError when the scheduler
        itself is gone (every host with it: the run cannot go on)."""
        try:
            return set(scheduler_workers(self.client))
        except (OSError, TimeoutError) as error:
            raise UserError(f"the fleet's scheduler is gone: {error}") from None

    def describe(self) -> dict[str, Any]:
        """What run.json records of the fleet (config.fleet)."""
        return {
            "spec": self.spec.text,
            "scheduler": self.client.scheduler.address,
            "server_address": self.server_address,
            "hosts": [{"name": h.name, "address": h.address, **h.facts} for h in self.hosts],
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a scheduler already gone has nothing to close
            self.client.close(timeout=5)


def connect(address: str) -> Any:
    """A Dask client of the scheduler at `address`; UserError when none answers."""
    from distributed import Client

    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise UserError(f"no Dask scheduler answers at {address}: {error}") from None


def scheduler_workers(client: Any) -> dict[str, dict[str, Any]]:
    """The scheduler's workers now (address → info), asked of it directly.

    Not `client.scheduler_info()`: that returns an attribute the client's own periodic
    refresh overwrites with a worker-less summary, so a host could seem gone when it is not.
    """
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def list_load_hosts(client: Any) -> list[LoadHost]:
    """Every worker with the `load` resource, by name, with the facts it reports."""
    workers = scheduler_workers(client)
    loaders = {
        address: info
        for address, info in workers.items()
        if info.get("resources", {}).get(LOAD_RESOURCE, 0) >= 1
    }
    if not loaders:
        return []
    facts = client.run(load_host_facts, workers=list(loaders))
    hosts = [
        LoadHost(str(info.get("name", address)), address, facts[address])
        for address, info in loaders.items()
    ]
    return sorted(hosts, key=lambda host: host.name)


def address_toward(scheduler: str) -> str:
    """This machine's address on the route to the scheduler (no packet is sent): where a
    server can listen for the load hosts of that scheduler's network."""
    parsed = urlparse(scheduler)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parsed.hostname or "", parsed.port or 8786))
        return str(probe.getsockname()[0])


@contextlib.contextmanager
def open_fleet(text: str, server_address: str | None = None) -> Iterator[Fleet]:
    """Connect to the fleet `text` names for a run, checked: every load host runs our
    harness, the scheduler never retries a task. A local fleet not already up is made for
    the run (as this process's children) and removed after it."""
    from harness.fleet import local

    spec = parse_fleet(text)
    with contextlib.ExitStack() as stack:
        if spec.local_hosts is not None:
            state = local.read_state()
            if state is None:
                state = stack.enter_context(local.attached_fleet(spec.local_hosts))
            elif len(state.hosts) < spec.local_hosts:
                raise UserError(
                    f"the local fleet has {len(state.hosts)} hosts, --fleet asks for "
                    f"{spec.local_hosts}: `harness fleet down`, then `harness fleet up --hosts "
                    f"{spec.local_hosts}` (or let the run make its own)"
                )
            scheduler = state.scheduler_address
            wanted = state.hosts[: spec.local_hosts]
            server_address = server_address or state.bridge_address
        else:
            scheduler = spec.scheduler or ""
            wanted = None
            server_address = server_address or address_toward(scheduler)
        client = connect(scheduler)
        stack.callback(lambda: client.close(timeout=5))
        if wanted is not None:
            client.wait_for_workers(len(wanted), timeout=WORKERS_TIMEOUT_S)
        hosts = list_load_hosts(client)
        if wanted is not None:
            hosts = [host for host in hosts if host.name in wanted]
            missing = sorted(set(wanted) - {host.name for host in hosts})
            if missing:
                raise UserError(f"local load hosts {', '.join(missing)} are not connected")
        if not hosts:
            raise UserError(
                f"no load hosts at {scheduler}: start workers with `--resources {LOAD_RESOURCE}=1`"
            )
        ours = harness_version()
        refused = [f"{h.name} {h.refusal(ours)}" for h in hosts if h.refusal(ours)]
        if refused:
            raise UserError("load hosts refused: " + "; ".join(refused))
        client.run_on_scheduler(_no_retries)
        yield Fleet(spec, client, hosts, server_address)

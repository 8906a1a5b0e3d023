"""The harness's side of a fleet: connect to a Dask scheduler, find its load hosts, check
them, and say where the server must listen for them to reach it.

A load host is a Dask worker started with the resource `load=1` (its name is the host's
name in results). `--fleet` takes `tls://SCHEDULER:PORT` (hosts started by hand on real
machines, with certificates from the fleet's CA: README) or `local:N` (namespace hosts on
this machine, harness.fleet.local: the fleet `harness fleet up` made, or one made for the
run and removed after it). Every fleet speaks mutual TLS (harness.fleet.security); a plain
`tcp://` scheduler — anyone who reaches it runs code on its hosts — is refused unless
`--insecure-fleet`, which warns on every use and is recorded in run.json.

On connecting, the scheduler is told `allowed_failures = 0`: a task whose worker dies is
failed at once (KilledWorker), never handed to another worker — a load phase must never
silently run twice. Its own value is given back when the run ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from harness.fleet.facts import harness_version, load_host_facts
from harness.fleet.security import FleetIdentity, check_member_name, user_identity, version_unit
from model.errors import UserError

CONNECT_TIMEOUT_S = 15.0
WORKERS_TIMEOUT_S = 60.0
LOAD_RESOURCE = "load"
_LOCAL = re.compile(r"local:(\d+)")


INSECURE_WARNING = (
    "warning: --insecure-fleet: the fleet's scheduler speaks plain tcp:// with no "
    "authentication — anyone who reaches it can run code on its load hosts"
)


@dataclass(frozen=True)
class FleetAccess:
    """How the harness proves itself to a scheduler given by address: its certificate
    (`--fleet-ca/--fleet-cert/--fleet-key`), or none with `--insecure-fleet`."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False


@dataclass(frozen=True)
class FleetSpec:
    """A parsed `--fleet`: a scheduler's address, or N local namespace hosts."""

    text: str
    scheduler: str | None = None  # tls://host:port (tcp:// only when insecure)
    local_hosts: int | None = None
    insecure: bool = False


def parse_fleet(text: str, access: FleetAccess | None = None) -> FleetSpec:
    """`local:N`, `tls://HOST:PORT` or (with `--insecure-fleet`) `tcp://HOST:PORT`;
    UserError naming a bad one."""
    access = access or FleetAccess()
    text = text.strip()
    match = _LOCAL.fullmatch(text)
    if match:
        hosts = int(match.group(1))
        if hosts < 1:
            raise UserError(f"--fleet {text}: a local fleet needs at least one host")
        return FleetSpec(text, local_hosts=hosts)
    parsed = urlparse(text)
    if parsed.scheme in ("tls", "tcp") and parsed.hostname and parsed.port:
        if parsed.scheme == "tcp" and not access.insecure:
            raise UserError(
                f"--fleet {text}: a tcp:// scheduler is unencrypted and unauthenticated "
                "(anyone who reaches it runs code on its hosts): start it with TLS and give "
                "--fleet tls://HOST:PORT with --fleet-ca/--fleet-cert/--fleet-key (README: "
                "fleet), or accept the risk with --insecure-fleet"
            )
        return FleetSpec(text, scheduler=text, insecure=parsed.scheme == "tcp")
    raise UserError(f"--fleet {text!r} is not local:N or tls://SCHEDULER:PORT")


def warn_insecure() -> None:
    """The --insecure-fleet warning, on stderr, on every use."""
    print(INSECURE_WARNING, file=sys.stderr)


@dataclass(frozen=True)
class Certified:
    """What a load host's certificate says of it, as the scheduler saw it in the TLS
    handshake (not the host's own word): its name and the harness it may run."""

    name: str | None  # the common name
    unit: str | None  # the organizational unit: `harness <version>` (harness.fleet.security)


@dataclass(frozen=True)
class LoadHost:
    """One load host: its Dask worker's name and address, what it reported of itself,
    and (over TLS) what its certificate says."""

    name: str
    address: str  # the worker's own address (tls://198.51.100.10:40123)
    facts: dict[str, Any]
    certified: Certified | None = None  # None: plain tcp:// (--insecure-fleet)

    def refusal(self, ours: str) -> str | None:
        """Why this host may not take part (its harness differs from ours — by its word or
        by its certificate —, its certificate names another host, or its name cannot be a
        folder of a run); None if it may."""
        try:
            check_member_name(self.name, "load host")
        except UserError as error:
            return str(error)
        theirs = self.facts.get("harness")
        if theirs != ours:
            return f"runs harness {theirs}, this harness is {ours}"
        if self.certified is not None:
            if self.certified.name != self.name:
                return f"its certificate is {self.certified.name!r}'s, not {self.name!r}'s"
            if self.certified.unit is not None and self.certified.unit != version_unit(ours):
                return (
                    f"its certificate is for {self.certified.unit}, this harness is {ours} "
                    "(`harness fleet cert` issues one for this harness)"
                )
        return None


def _peer_certificates(dask_scheduler: Any) -> dict[str, tuple[str | None, str | None]]:
    # runs on the scheduler: each worker's certificate as its TLS handshake presented it
    found: dict[str, tuple[str | None, str | None]] = {}
    for address, batched in dask_scheduler.stream_comms.items():
        comm = getattr(batched, "comm", None)
        cert = (getattr(comm, "extra_info", None) or {}).get("peercert") or {}
        subject = {key: value for rdn in cert.get("subject", ()) for key, value in rdn}
        found[address] = (subject.get("commonName"), subject.get("organizationalUnitName"))
    return found


def _set_allowed_failures(dask_scheduler: Any, value: int) -> int:
    # runs on the scheduler: 0 fails a task whose worker dies instead of moving it on;
    # gives back the value it had, to be restored after the run
    before = int(dask_scheduler.allowed_failures)
    dask_scheduler.allowed_failures = value
    return before


class Fleet:
    """A connected fleet: the Dask client, its load hosts, and where the server listens."""

    def __init__(
        self,
        spec: FleetSpec,
        client: Any,
        hosts: list[LoadHost],
        server_address: str,
        tls: bool = True,
    ) -> None:
        self.spec = spec
        self.tls = tls
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
            "tls": self.tls,
            "insecure": self.spec.insecure,
            "server_address": self.server_address,
            "hosts": [
                {
                    "name": h.name,
                    "address": h.address,
                    **h.facts,
                    "certificate": dataclasses.asdict(h.certified) if h.certified else None,
                }
                for h in self.hosts
            ],
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a scheduler already gone has nothing to close
            self.client.close(timeout=5)


def connect(address: str, identity: FleetIdentity | None) -> Any:
    """A Dask client of the scheduler at `address`, over mutual TLS with `identity` (None:
    plain tcp://, --insecure-fleet); UserError when none answers or its certificate is not
    our fleet's (the TLS handshake fails both ways)."""
    from distributed import Client

    security = identity.security() if identity is not None else None
    try:
        return Client(address, security=security, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise UserError(
            f"no Dask scheduler of this fleet answers at {address} (none listens, or its "
            f"certificate is not from the fleet's CA): {error}"
        ) from None


def local_state_for_run(hosts: int | None = None) -> Any:
    """The local fleet a run may use (None: none is up); UserError for one left by a
    killed run, one another live run made for itself, or one with too few hosts."""
    from harness.fleet import local

    state = local.read_state()
    if state is None:
        return None
    local.check_not_left_over(state)
    if state.owner_pid is not None and state.owner_pid != os.getpid():
        raise UserError(
            f"the local fleet was made for another run (pid {state.owner_pid}) and goes with "
            "it: wait for that run, or `harness fleet up --hosts N` for a fleet runs share"
        )
    if hosts is not None and len(state.hosts) < hosts:
        raise UserError(
            f"the local fleet has {len(state.hosts)} hosts, --fleet asks for "
            f"{hosts}: `harness fleet down`, then `harness fleet up --hosts "
            f"{hosts}` (or let the run make its own)"
        )
    return state


def remote_identity(spec: FleetSpec, access: FleetAccess) -> FleetIdentity | None:
    """The harness's certificate for a scheduler given by address (None: --insecure-fleet
    on tcp://); UserError when a tls:// fleet lacks one."""
    if spec.insecure:
        warn_insecure()
        return None
    return user_identity(access.ca, access.cert, access.key)


def scheduler_workers(client: Any) -> dict[str, dict[str, Any]]:
    """The scheduler's workers now (address → info), asked of it directly.

    Not `client.scheduler_info()`: that returns an attribute the client's own periodic
    refresh overwrites with a worker-less summary, so a host could seem gone when it is not.
    """
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def list_load_hosts(client: Any, tls: bool = True) -> list[LoadHost]:
    """Every worker with the `load` resource, by name, with the facts it reports and (over
    TLS) what its certificate says, as the scheduler saw it."""
    workers = scheduler_workers(client)
    loaders = {
        address: info
        for address, info in workers.items()
        if info.get("resources", {}).get(LOAD_RESOURCE, 0) >= 1
    }
    if not loaders:
        return []
    facts = client.run(load_host_facts, workers=list(loaders))
    certificates = client.run_on_scheduler(_peer_certificates) if tls else {}
    hosts = [
        LoadHost(
            str(info.get("name", address)),
            address,
            facts[address],
            Certified(*certificates.get(address, (None, None))) if tls else None,
        )
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
def open_fleet(
    text: str, server_address: str | None = None, access: FleetAccess | None = None
) -> Iterator[Fleet]:
    """Connect to the fleet `text` names for a run, checked: every load host runs our
    harness, the scheduler never retries a task (its setting given back at the end). A
    local fleet not already up is made for the run (as this process's children) and
    removed after it; a local fleet that is up is never taken down by a run."""
    from harness.fleet import local

    access = access or FleetAccess()
    spec = parse_fleet(text, access)
    with contextlib.ExitStack() as stack:
        if spec.local_hosts is not None:
            state = local_state_for_run(spec.local_hosts)
            if state is None:
                state = stack.enter_context(local.attached_fleet(spec.local_hosts))
            scheduler = state.scheduler_address
            identity: FleetIdentity | None = state.identity()
            wanted = state.hosts[: spec.local_hosts]
            server_address = server_address or state.bridge_address
        else:
            scheduler = spec.scheduler or ""
            identity = remote_identity(spec, access)
            wanted = None
            server_address = server_address or address_toward(scheduler)
        client = connect(scheduler, identity)
        stack.callback(lambda: client.close(timeout=5))
        if wanted is not None:
            client.wait_for_workers(len(wanted), timeout=WORKERS_TIMEOUT_S)
        hosts = list_load_hosts(client, tls=identity is not None)
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
        before = client.run_on_scheduler(_set_allowed_failures, value=0)
        stack.callback(_restore_allowed_failures, client, before)
        yield Fleet(spec, client, hosts, server_address, tls=identity is not None)


def _restore_allowed_failures(client: Any, value: int) -> None:
    with contextlib.suppress(Exception):  # a scheduler gone with the run has nothing to restore
        client.run_on_scheduler(_set_allowed_failures, value=value)

"""Load hosts on this machine: network namespaces joined to it by veth pairs on a bridge.

`harness fleet up --hosts N` (root) makes namespaces `harness-fleet-1..N`, each with its own
veth pair (`hfleet<i>h` on the bridge, `hfleet<i>n` inside) and its own addresses from
198.51.100.0/24 — TEST-NET-2, a documentation range (RFC 5737) that is never routed and
is no private network anyone uses. Each namespace's ephemeral port range is
FLEET_PORT_RANGE (1024–65535), its own to set: nothing else binds there. The bridge
`hfleet0` holds 198.51.100.1: the scheduler listens there (only there, on a port the
kernel picks), and so do the servers the fleet loads. One Dask worker runs in each
namespace (`--resources load=1 --nthreads 1 --no-nanny`: a killed worker stays dead, no
nanny restarts it under the same name). Each host has its own source addresses, so its own
ports toward one server port: 32,256 per address that connect() hands out readily (the
even ones, drivers.agent.plan.connect_ports).

Every member speaks mutual TLS (harness.fleet.security): `fleet up` makes the fleet's
own CA and a certificate for the scheduler, each worker and the harness in the state
directory (0700, root's; keys 0600), and Dask refuses any peer without a certificate from
that CA — so no other user of this machine can submit work to the root-run workers, and a
process that took the port first could not pass for our scheduler.

One fleet at a time: `up` and `down` hold a lock (LOCK_PATH) while they make or remove
one. A fleet made for a run (attached) records the run's pid: another run or `fleet up`
meeting it while that run lives is refused, and one whose run was killed is named as
left over, with `harness fleet down` as its remedy.

The network (namespaces, veths, the bridge) is harness.fleet.network's. Everything it
makes is named with the prefix (namespaces `harness-fleet-`, links `hfleet`,
processes by the state directory on their command line), and `harness fleet down` removes
whatever has those names — also after a crash that lost the state file.

Detached (`fleet up`): the scheduler and workers outlive the command (`setsid -f`).
Attached (a run's own fleet, `--fleet local:N` when none is up): they are this process's
children, tied to it by a parent-death signal, stopped and reaped at the run's end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from drivers.processes import spawn
from harness.fleet.facts import harness_version
from harness.fleet.network import BRIDGE as BRIDGE
from harness.fleet.network import BRIDGE_ADDRESS as BRIDGE_ADDRESS
from harness.fleet.network import FLEET_PORT_RANGE as FLEET_PORT_RANGE
from harness.fleet.network import (
    NAMESPACE_PREFIX,
    make_network,
    namespace_pids,
    our_links,
    our_namespaces,
    remove_network,
)
from harness.fleet.network import NETWORK as NETWORK
from harness.fleet.network import host_addresses as host_addresses
from harness.fleet.security import (
    HARNESS_IDENTITY,
    SCHEDULER_IDENTITY,
    FleetIdentity,
    issue,
    make_ca,
    private_directory,
)
from model.errors import UserError
from model.files import write_text_atomically

STATE_DIR = Path("/run/harness-fleet")
LOCK_PATH = Path("/run/harness-fleet.lock")  # beside the state: `down` removes STATE_DIR
STATE_FORMAT = "harness.fleet-state/2"
READY_TIMEOUT_S = 90.0
LOCK_TIMEOUT_S = 10.0
STOP_GRACE_S = 5.0

# the children of an attached fleet (this process started them; it reaps them)
_ATTACHED: list[subprocess.Popen[bytes]] = []


@dataclass(frozen=True)
class LocalFleetState:
    """What `fleet up` made, written to STATE_DIR/state.json for `down` and for runs."""

    hosts: tuple[str, ...]  # namespace names, which are also the Dask workers' names
    addresses: dict[str, list[str]]  # host → its addresses
    bridge_address: str
    scheduler_address: str  # tls://198.51.100.1:PORT
    detached: bool
    owner_pid: int | None = None  # an attached fleet's run (None: detached, `fleet up`'s)
    format: str = STATE_FORMAT

    def __post_init__(self) -> None:
        if self.format != STATE_FORMAT:
            raise ValueError(f"fleet state {self.format!r} is not {STATE_FORMAT}")

    def identity(self, name: str = HARNESS_IDENTITY) -> FleetIdentity:
        """The certificate files of member `name` (the harness's, by default)."""
        return member_identity(name)

    def owner_gone(self) -> bool:
        """An attached fleet whose run is no longer alive (killed: it could not remove it)."""
        return self.owner_pid is not None and not psutil.pid_exists(self.owner_pid)


def state_path() -> Path:
    return STATE_DIR / "state.json"


def tls_dir() -> Path:
    return STATE_DIR / "tls"


def member_identity(name: str) -> FleetIdentity:
    """Where `fleet up` wrote member `name`'s certificate (the CA's beside it)."""
    directory = tls_dir()
    return FleetIdentity(directory / "ca.pem", directory / f"{name}.pem", directory / f"{name}.key")


@contextlib.contextmanager
def fleet_lock(timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Held while a local fleet is made or removed: a second `up` (or `down`) waits up to
    `timeout_s`, then is refused with one line instead of building over the first."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UserError(
                        "another harness is making or removing the local fleet "
                        f"({LOCK_PATH} is locked): wait for it, then `harness fleet status`"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def read_state() -> LocalFleetState | None:
    """The local fleet that is up, or None; UserError for a state file we cannot read."""
    path = state_path()
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        data["hosts"] = tuple(data["hosts"])
        return LocalFleetState(**data)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise UserError(
            f"{path} is unreadable ({error}): `harness fleet down` removes it"
        ) from None


def check_not_left_over(state: LocalFleetState) -> None:
    """UserError when `state` is an attached fleet whose run was killed (its remedy named)."""
    if state.owner_gone():
        raise UserError(
            f"a local fleet left by a killed harness run (pid {state.owner_pid}) is still "
            "here: `harness fleet down` removes it"
        )


def our_processes() -> list[psutil.Process]:
    """Live processes of a local fleet: in one of our namespaces, or carrying the state
    directory on their command line (the scheduler and workers' --pid-file). Zombies are
    dead already (left for a parent to reap) and not counted."""
    pids = set(namespace_pids())
    marker = str(STATE_DIR)
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(marker in part for part in process.info["cmdline"] or ()):
                pids.add(process.pid)
    pids.discard(os.getpid())
    found = []
    for pid in sorted(pids):
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def leftovers() -> dict[str, list[str]]:
    """What of a local fleet exists now (namespaces, links, live processes); empty lists
    when nothing does."""
    processes = []
    for process in our_processes():
        with contextlib.suppress(psutil.Error):
            processes.append(f"{process.pid} {' '.join(process.cmdline())}")
    return {"namespaces": our_namespaces(), "links": our_links(), "processes": processes}


def _require_root() -> None:
    if os.geteuid() != 0:
        raise UserError("a local fleet needs root (network namespaces): run it with sudo")
    if shutil.which("ip") is None:
        raise UserError("ip not found: install iproute2")


def _start(command: list[str], log_name: str, detach: bool, env: dict[str, str]) -> None:
    log_path = STATE_DIR / "logs" / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        if detach:  # setsid -f: its own session, its parent gone at once (not our child)
            subprocess.run(
                ["setsid", "-f", *command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                check=True,
            )
        else:
            _ATTACHED.append(
                spawn(command, stdout=log, stderr=log, death_signal=signal.SIGTERM, env=env)
            )


# Dask's own sampling, off or slowed: a fleet host runs one agent and waits, and the load
# shares this box's two cores with the server measured. Idle, 8 workers and the scheduler
# took 36 % of a core (workers 30 %: the 10 ms statistical profiler, the 20 ms event-loop
# tick, the 500 ms system monitor with its GIL sampler), while a server holding 200,000
# idle connections took 27 % (node-http, 56 workers).
QUIET_DASK = {
    "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
    "DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL": "500ms",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "2s",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__GIL__ENABLED": "False",
}


def scheduler_file() -> Path:
    return STATE_DIR / "scheduler.json"


def scheduler_command() -> list[str]:
    """The scheduler: TLS only, on the bridge only, on a port the kernel picks (written
    to scheduler_file()): no fixed port another user could take first."""
    return [
        sys.executable, "-m", "distributed.cli.dask_scheduler",
        "--host", BRIDGE_ADDRESS, "--port", "0", "--protocol", "tls", "--no-dashboard",
        *member_identity(SCHEDULER_IDENTITY).cli_options(),
        "--scheduler-file", str(scheduler_file()),
        "--pid-file", str(STATE_DIR / "scheduler.pid"),
    ]  # fmt: skip


def worker_command(namespace: str, address: str, scheduler: str) -> list[str]:
    """One load host's worker: in its namespace, one task at a time, `load=1`, no nanny,
    its own certificate."""
    return [
        "ip", "netns", "exec", namespace,
        sys.executable, "-m", "distributed.cli.dask_worker", scheduler,
        *member_identity(namespace).cli_options(),
        "--name", namespace, "--host", address, "--nthreads", "1",
        "--resources", "load=1", "--no-nanny", "--no-dashboard", "--memory-limit", "0",
        # a worker whose scheduler is gone (a crashed harness) stops by itself
        "--death-timeout", "60",
        "--local-directory", str(STATE_DIR / "work" / namespace),
        "--pid-file", str(STATE_DIR / f"{namespace}.pid"),
    ]  # fmt: skip


def _wait_for_scheduler(timeout_s: float) -> str:
    """The scheduler's address once it wrote its file and listens there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            address = str(json.loads(scheduler_file().read_text())["address"])
            host, port = address.removeprefix("tls://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), 1.0):
                return address
        time.sleep(0.2)
    raise UserError(f"the fleet's scheduler did not start within {timeout_s:.0f} s: {_log_tail()}")


def _make_certificates(hosts: tuple[str, ...]) -> None:
    """The fleet's CA and a certificate for the scheduler, each host and the harness."""
    ca = make_ca(tls_dir())
    issue(ca, SCHEDULER_IDENTITY, tls_dir(), BRIDGE_ADDRESS)
    issue(ca, HARNESS_IDENTITY, tls_dir())
    version = harness_version()
    for host in hosts:
        issue(ca, host, tls_dir(), harness_version=version)


def _log_tail(limit_chars: int = 600) -> str:
    texts = []
    for path in sorted((STATE_DIR / "logs").glob("*.log")):
        text = path.read_text(errors="replace").strip()
        if text:
            texts.append(f"{path.name}: {text[-limit_chars:]}")
    return " | ".join(texts) or "(no log)"


def fleet_up(hosts: int, addresses_per_host: int = 1, detach: bool = True) -> LocalFleetState:
    """Make `hosts` namespace hosts, the scheduler and one worker in each, all on mutual
    TLS; wait until every worker joined. On a failure after the checks, everything made so
    far is removed again; a fleet that was already up is never touched."""
    _require_root()
    if hosts < 1 or addresses_per_host < 1:
        raise UserError("a local fleet needs at least one host of at least one address")
    host_addresses(hosts, addresses_per_host)  # fits in the range, before anything is made
    with fleet_lock():
        state = read_state()
        if state is not None:
            check_not_left_over(state)
        if state is not None or any(leftovers().values()):
            raise UserError("a local fleet is up (or left over): `harness fleet down` first")
        try:
            return _make_fleet(hosts, addresses_per_host, detach)
        except BaseException:
            with contextlib.suppress(Exception):
                _remove_fleet()
            raise


def _make_fleet(hosts: int, addresses_per_host: int, detach: bool) -> LocalFleetState:
    private_directory(STATE_DIR)
    names = tuple(f"{NAMESPACE_PREFIX}{index}" for index in range(1, hosts + 1))
    _make_certificates(names)
    addresses = make_network(hosts, addresses_per_host)
    env = {
        **os.environ,
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True",
        **QUIET_DASK,
    }
    _start(scheduler_command(), "scheduler.log", detach, env)
    scheduler = _wait_for_scheduler(READY_TIMEOUT_S)
    state = LocalFleetState(
        tuple(addresses),
        addresses,
        BRIDGE_ADDRESS,
        scheduler,
        detached=detach,
        owner_pid=None if detach else os.getpid(),
    )
    write_text_atomically(state_path(), json.dumps(asdict(state), indent=2) + "\n")
    for namespace, own in addresses.items():
        _start(worker_command(namespace, own[0], scheduler), f"{namespace}.log", detach, env)
    _wait_for_workers(state, hosts)
    return state


def _wait_for_workers(state: LocalFleetState, hosts: int) -> None:
    from distributed import Client

    security = state.identity().security()
    with Client(
        state.scheduler_address, security=security, timeout=READY_TIMEOUT_S, set_as_default=False
    ) as client:
        try:
            client.wait_for_workers(hosts, timeout=READY_TIMEOUT_S)
        except TimeoutError:
            raise UserError(
                f"{hosts} load hosts did not join within {READY_TIMEOUT_S:.0f} s: {_log_tail()}"
            ) from None


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until each process ended (a zombie has: a detached one has no parent here to
    reap it); those still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in processes if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _running(p)]
    return alive


def fleet_down() -> dict[str, list[str]]:
    """Stop every process of a local fleet, remove its namespaces, links and state; what
    was removed. Finds them by name, so a crash that lost the state leaves nothing either.
    UserError if anything is still there afterwards."""
    _require_root()
    with fleet_lock():
        return _remove_fleet()


def _remove_fleet() -> dict[str, list[str]]:
    removed: dict[str, list[str]] = {"processes": [], "namespaces": [], "links": []}
    # the workers first: a worker whose scheduler went first waits to reconnect
    processes = our_processes()
    in_namespaces = set(namespace_pids())
    for group in (
        [p for p in processes if p.pid in in_namespaces],
        [p for p in processes if p.pid not in in_namespaces],
    ):
        for process in group:
            with contextlib.suppress(psutil.Error):
                removed["processes"].append(f"{process.pid} {' '.join(process.cmdline()[:4])}")
                process.terminate()
        alive = _wait_gone(group, STOP_GRACE_S)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        _wait_gone(alive, STOP_GRACE_S)
    while _ATTACHED:  # our own children: reaped, not left as zombies
        child = _ATTACHED.pop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(STOP_GRACE_S)
    removed |= remove_network(STOP_GRACE_S)
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    left = leftovers()
    if any(left.values()):
        raise UserError(f"fleet down left {left}")
    return removed


@contextlib.contextmanager
def attached_fleet(hosts: int) -> Iterator[LocalFleetState]:
    """A local fleet for one run: this process's children, removed when the run ends."""
    state = fleet_up(hosts, detach=False)
    try:
        yield state
    finally:
        fleet_down()

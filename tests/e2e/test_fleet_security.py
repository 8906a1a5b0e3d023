"""A local fleet is closed to everyone without its certificates, one at a time (root only).

Real Dask scheduler and workers in real namespaces: a client with no certificate, one with
a certificate from another CA, a plain-TCP client and a worker from another CA are all
refused; a non-root user can neither read the fleet's keys nor get past its handshake; a
second `fleet up` (also two at once) is refused with one line and the first keeps
working; a fleet left by a killed run is named with its remedy; a run gives the
scheduler's `allowed_failures` back.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.fleet import local, security
from harness.fleet.client import connect, list_load_hosts, open_fleet, scheduler_workers
from harness.fleet.facts import harness_version
from model.errors import UserError
from tests.e2e.test_fleet import assert_nothing_left, require_namespaces
from tests.helpers import harness

pytestmark = pytest.mark.serial  # one fleet a machine: its namespaces, links and state directory

REFUSED_TIMEOUT_S = 6


def require_no_fleet() -> None:
    require_namespaces()
    if local.read_state() is not None or any(local.leftovers().values()):
        pytest.skip("a local fleet is up on this machine")


def test_two_fleet_ups_at_once_make_one_fleet() -> None:
    require_no_fleet()
    started = [
        subprocess.Popen(
            [str(shutil.which("harness")), "fleet", "up", "--hosts", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outcomes = [(p.wait(timeout=180), p.stderr.read()) for p in started]  # type: ignore[union-attr]
        codes = sorted(code for code, _ in outcomes)
        assert codes == [0, 1], outcomes
        [refusal] = [text.strip() for code, text in outcomes if code == 1]
        assert "\n" not in refusal and ("fleet" in refusal), refusal
        status = harness("fleet", "status", timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
    finally:
        for process in started:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        down = harness("fleet", "down", timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_nothing_left()


KILLED_RUN = textwrap.dedent(
    """
    import time
    from harness.fleet import local
    local.fleet_up(1, detach=False)
    print("up", flush=True)
    time.sleep(600)
    """
)


def test_a_fleet_left_by_a_killed_run_is_named_with_its_remedy() -> None:
    require_no_fleet()
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN], stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        assert run.stdout is not None and run.stdout.readline().strip() == "up"
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=10)
        state = local.read_state()
        assert state is not None and state.owner_pid == run.pid and state.owner_gone()
        again = harness("fleet", "up", "--hosts", "1", timeout_s=60)
        assert again.returncode == 1
        assert f"killed harness run (pid {run.pid})" in again.stderr
        assert "harness fleet down" in again.stderr
        with pytest.raises(UserError, match="killed harness run"), open_fleet("local:1"):
            pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            run.kill()
        down = harness("fleet", "down", timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_nothing_left()


@pytest.fixture(scope="module")
def one_host() -> Iterator[local.LocalFleetState]:
    """One namespace host (this process's children), removed at the end in any case."""
    require_no_fleet()
    state = local.fleet_up(1, detach=False)
    try:
        yield state
    finally:
        if local.read_state() is not None or any(local.leftovers().values()):
            local.fleet_down()


def client_outcome(address: str, sec: object | None) -> str:
    """'connected' or the error a Dask client of `address` with `sec` met."""
    from distributed import Client

    try:
        with Client(address, security=sec, timeout=REFUSED_TIMEOUT_S, set_as_default=False):
            return "connected"
    except Exception as error:  # every refusal (TLS, timeout, type) is an answer here
        return f"refused: {type(error).__name__}"


def test_only_a_holder_of_the_fleets_certificate_reaches_its_scheduler(
    one_host: local.LocalFleetState, tmp_path: Path
) -> None:
    address = one_host.scheduler_address
    assert address.startswith("tls://198.51.100.1:") and not address.endswith(":8786")
    other_ca = security.make_ca(tmp_path / "other")
    stranger = security.issue(other_ca, "harness", tmp_path / "other")
    assert client_outcome(address, stranger.security()).startswith("refused")
    assert client_outcome(address.replace("tls://", "tcp://"), None).startswith("refused")
    # our CA trusted, the stranger's certificate presented: still refused (the scheduler
    # checks the client's certificate against the fleet's CA)
    ours = one_host.identity()
    crossed = security.FleetIdentity(ours.ca_path, stranger.cert_path, stranger.key_path)
    assert client_outcome(address, crossed.security()).startswith("refused")
    client = connect(address, ours)
    try:
        assert client.submit(sum, [1, 2, 3], resources={"load": 1}).result(timeout=30) == 6
    finally:
        client.close(timeout=5)


def test_a_worker_from_another_ca_cannot_join(
    one_host: local.LocalFleetState, tmp_path: Path
) -> None:
    other = security.issue(security.make_ca(tmp_path / "ca"), "intruder", tmp_path / "ca")
    command = [
        sys.executable, "-m", "distributed.cli.dask_worker", one_host.scheduler_address,
        *other.cli_options(), "--name", "intruder", "--nthreads", "1", "--no-nanny",
        "--no-dashboard", "--death-timeout", "8", "--local-directory", str(tmp_path / "w"),
    ]  # fmt: skip
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    worker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        client = connect(one_host.scheduler_address, one_host.identity())
        try:
            for _ in range(20):
                names = {w.get("name") for w in scheduler_workers(client).values()}
                assert "intruder" not in names
                time.sleep(0.3)
        finally:
            client.close(timeout=5)
        assert worker.wait(timeout=30) != 0  # it gave up: never joined
    finally:
        with contextlib.suppress(ProcessLookupError):
            worker.kill()
        worker.wait(timeout=10)


NOBODY_TRIES = textwrap.dedent(
    """
    import socket, ssl, sys
    host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        open(key).read()
        print("read the key")
    except PermissionError:
        print("key unreadable")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), 5) as raw:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"\\x00" * 64)
                tls.settimeout(5)
                data = tls.recv(64)
        print("answered" if data else "closed")
    except (ssl.SSLError, OSError) as error:
        print("refused", type(error).__name__)
    """
)


def test_a_non_root_user_can_neither_read_the_keys_nor_pass_the_handshake(
    one_host: local.LocalFleetState,
) -> None:
    if subprocess.run(["id", "nobody"], capture_output=True).returncode != 0:
        pytest.skip("no user nobody here")
    host, port = one_host.scheduler_address.removeprefix("tls://").rsplit(":", 1)
    key = one_host.identity().key_path
    assert key.stat().st_mode & 0o777 == 0o600 and local.STATE_DIR.stat().st_mode & 0o077 == 0
    tried = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", NOBODY_TRIES,
         host, port, str(key)],
        capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip
    lines = tried.stdout.split("\n")
    assert lines[0] == "key unreadable", tried.stdout + tried.stderr
    assert lines[1].startswith(("refused", "closed")), tried.stdout + tried.stderr


def test_a_second_fleet_up_is_refused_and_the_first_keeps_working(
    one_host: local.LocalFleetState,
) -> None:
    again = harness("fleet", "up", "--hosts", "1", timeout_s=60)
    assert again.returncode == 1
    message = again.stderr.strip()
    assert "\n" not in message and "fleet down" in message, again.stderr
    assert local.read_state() == one_host
    client = connect(one_host.scheduler_address, one_host.identity())
    try:
        assert len(scheduler_workers(client)) == 1
    finally:
        client.close(timeout=5)


def set_allowed_failures(dask_scheduler: object, value: int) -> int:
    before = int(dask_scheduler.allowed_failures)  # type: ignore[attr-defined]
    dask_scheduler.allowed_failures = value  # type: ignore[attr-defined]
    return before


def test_a_run_gives_the_scheduler_its_allowed_failures_back(
    one_host: local.LocalFleetState,
) -> None:
    client = connect(one_host.scheduler_address, one_host.identity())
    try:
        client.run_on_scheduler(set_allowed_failures, value=3)
        with open_fleet("local:1") as fleet:
            assert fleet.tls and fleet.describe()["tls"] is True
            assert fleet.client.run_on_scheduler(set_allowed_failures, value=0) == 0
        assert client.run_on_scheduler(set_allowed_failures, value=3) == 3
    finally:
        client.close(timeout=5)


def start_worker(
    state: local.LocalFleetState, identity: security.FleetIdentity, name: str, workdir: Path
) -> subprocess.Popen[bytes]:
    """A load worker of `name` joining the fleet with `identity` (its own certificate)."""
    command = [
        sys.executable, "-m", "distributed.cli.dask_worker", state.scheduler_address,
        *identity.cli_options(), "--name", name, "--nthreads", "1", "--no-nanny",
        "--resources", "load=1", "--no-dashboard", "--death-timeout", "30",
        "--local-directory", str(workdir / name),
    ]  # fmt: skip
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def test_a_host_is_judged_by_its_certificate_not_only_by_its_word(
    one_host: local.LocalFleetState, tmp_path: Path
) -> None:
    """Two workers with certificates from the fleet's own CA: one certified for another
    harness version, one whose certificate names another host. Both report our version;
    both are refused, by what their certificates say."""
    ca = security.load_ca(local.tls_dir())
    older = security.issue(ca, "older", tmp_path / "c", harness_version="0.0.1+src.old")
    posing = security.issue(ca, "someone-else", tmp_path / "c", harness_version=harness_version())
    workers = [
        start_worker(one_host, older, "older", tmp_path),
        start_worker(one_host, posing, "posing", tmp_path),
    ]
    try:
        client = connect(one_host.scheduler_address, one_host.identity())
        try:
            client.wait_for_workers(3, timeout=60)
            hosts = {host.name: host for host in list_load_hosts(client)}
        finally:
            client.close(timeout=5)
        ours = harness_version()
        assert hosts["older"].facts["harness"] == ours == hosts["posing"].facts["harness"]
        assert "certificate is for harness 0.0.1+src.old" in str(hosts["older"].refusal(ours))
        assert "certificate is 'someone-else''s" in str(hosts["posing"].refusal(ours))
        assert hosts[one_host.hosts[0]].refusal(ours) is None
        status = harness("fleet", "status", timeout_s=60)
        assert status.returncode == 1 and "refused" in status.stdout, status.stdout
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)

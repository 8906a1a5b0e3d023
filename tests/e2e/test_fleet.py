"""A fleet of two network-namespace load hosts on Dask, end to end (root only).

In file order: `fleet up`/`down` from the command line (down after a lost state file);
then one fleet for the rest: status, a smoke compare through it (merged counts are the
sum of the hosts'), a WebSocket connection ramp split over the hosts, a worker killed
mid-step (that step fails naming the host), and `fleet down` leaving no namespace, link
or process.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from charts.report import render_html
from drivers import histograms as hdr
from harness.compare import build_plan
from harness.fleet import local
from harness.fleet.client import FleetAccess
from harness.fleet.facts import harness_version
from harness.run import Plan, Runner
from harness.run.outputs import ramp_dir
from harness.run_options import RunOptions
from model.results import Case, Run, read_run
from tests.helpers import harness, require_framework, require_tools

pytestmark = pytest.mark.serial  # one fleet a machine: its namespaces, links and state directory

HOSTS = ("harness-fleet-1", "harness-fleet-2")


def require_namespaces() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a local fleet needs root and iproute2 (network namespaces)")
    pytest.importorskip("distributed")


def namespaces() -> list[str]:
    output = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in output.splitlines() if line.startswith("harness-fleet")]


def links() -> list[str]:
    output = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip() for line in output.splitlines() if ": hfleet" in line]


def fleet_processes() -> list[str]:
    """Live (not zombie) processes that are a fleet's: Dask's scheduler and workers started
    by it (the state directory on their command line), and any wrk or agent in a namespace."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or ())
        if process.info["status"] != psutil.STATUS_ZOMBIE and str(local.STATE_DIR) in cmdline:
            found.append(f"{process.pid} {cmdline}")
    return found


def assert_nothing_left() -> None:
    assert namespaces() == []
    assert links() == []
    assert fleet_processes() == []
    assert not local.STATE_DIR.exists()


def test_fleet_up_status_and_down_after_the_state_is_lost() -> None:
    require_namespaces()
    if local.read_state() is not None or any(local.leftovers().values()):
        pytest.skip("a local fleet is up on this machine")
    up = harness("fleet", "up", "--hosts", "1", timeout_s=180)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert namespaces() == ["harness-fleet-1"] and "hfleet0" in links()
        assert "198.51.100.10" in up.stdout
        status = harness("fleet", "status", timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "harness-fleet-1" in status.stdout and "20,000" in status.stdout
        again = harness("fleet", "up", "--hosts", "1", timeout_s=60)
        assert again.returncode == 1 and "fleet down" in again.stderr
        local.state_path().unlink()  # as after a crash: down finds its own by name
    finally:
        down = harness("fleet", "down", timeout_s=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "removed" in down.stdout
    assert_nothing_left()


def run_through_the_fleet(
    profile_name: str, overrides: dict[str, object], out: Path
) -> tuple[Plan, Run, Case]:
    """aiohttp through a profile with its load from the two hosts; its one case, ok."""
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile=profile_name,
            settings=overrides,
            results_dir=out,
            fleet="local:2",
            verify=False,  # the load's split and merge are checked, not the server
        )
    )
    run = Runner(plan).run()
    [case] = run.cases
    assert case.status == "ok", case.error
    return plan, run, case


@pytest.fixture(scope="module")
def two_hosts() -> Iterator[local.LocalFleetState]:
    """Two namespace hosts (this process's children), removed at the end in any case."""
    require_namespaces()
    require_tools("wrk")
    require_framework("aiohttp")
    if local.read_state() is not None or any(local.leftovers().values()):
        pytest.skip("a local fleet is up on this machine")
    state = local.fleet_up(len(HOSTS), detach=False)
    try:
        yield state
    finally:
        if local.read_state() is not None or any(local.leftovers().values()):
            local.fleet_down()


def test_status_lists_each_host_with_its_limits(two_hosts: local.LocalFleetState) -> None:
    from harness.cli.fleet import fleet_status
    from harness.fleet.local import FLEET_PORT_RANGE

    rows, ours = fleet_status(None)
    assert [row["name"] for row in rows] == list(HOSTS)
    assert ours == harness_version()
    for row, address in zip(rows, ("198.51.100.10", "198.51.100.11"), strict=True):
        assert row["addresses"] == [address]
        assert row["cores"] >= 1 and row["nofile_soft"] > 1000
        assert tuple(row["port_range"]) == FLEET_PORT_RANGE  # type: ignore[arg-type]
        assert row["tools"]["wrk"] and row["harness"] == ours  # type: ignore[index]
        assert row["refused"] is None
    # the same fleet named by its scheduler, as real machines are, with the harness's
    # certificate given as --fleet-ca/--fleet-cert/--fleet-key
    mine = two_hosts.identity()
    access = FleetAccess(str(mine.ca_path), str(mine.cert_path), str(mine.key_path))
    by_address, _ = fleet_status(two_hosts.scheduler_address, access)
    assert [row["name"] for row in by_address] == list(HOSTS)


def test_the_fleets_dask_samples_nothing_it_does_not_need(
    two_hosts: local.LocalFleetState,
) -> None:
    """The load shares this box's cores with the server measured: Dask's statistical
    profiler and GIL sampler are off on every worker, its event-loop tick and system monitor
    slowed (local.QUIET_DASK), as each worker's own config reads them."""
    from harness.fleet.client import connect

    def sampling() -> tuple[object, ...]:
        import dask

        return tuple(
            dask.config.get(key)
            for key in (
                "distributed.worker.profile.enabled",
                "distributed.admin.tick.interval",
                "distributed.admin.system-monitor.interval",
                "distributed.admin.system-monitor.gil.enabled",
            )
        )

    client = connect(two_hosts.scheduler_address, two_hosts.identity())
    try:
        by_worker = client.run(sampling)
        on_scheduler = client.run_on_scheduler(sampling)
    finally:
        client.close()
    assert len(by_worker) == len(HOSTS)
    for read in (*by_worker.values(), on_scheduler):
        assert read == (False, "500ms", "2s", False), read


def test_a_smoke_compare_through_the_fleet_sums_the_hosts(
    two_hosts: local.LocalFleetState, tmp_path: Path
) -> None:
    plan, run, case = run_through_the_fleet(
        "smoke", {"warmup_s": 0, "cooldown_s": 0, "ramp.duration_s": 1}, tmp_path
    )
    assert run.config["fleet"]["server_address"] == two_hosts.bridge_address
    assert [h["name"] for h in run.config["fleet"]["hosts"]] == list(HOSTS)
    assert [s.offered for s in case.steps] == [10, 20]
    for index, step in enumerate(case.steps):
        hosts = step.figures.hosts
        assert [h["host"] for h in hosts] == list(HOSTS)
        assert sum(h["offered"] for h in hosts) == step.offered
        assert all(h["replies"] > 0 for h in hosts)
        # merged counts are exactly the sums of the hosts' counts
        assert step.replies == sum(h["replies"] for h in hosts)
        assert step.figures.requests == sum(h["requests"] for h in hosts)
        assert step.figures.bytes_read == sum(h["bytes_read"] for h in hosts)
        host_errors = sum(n for h in hosts for k, n in h["errors"].items() if k != "driver")
        assert step.errors["total"] == host_errors
        # percentiles of parts are not averaged: unavailable, bounded by the largest
        assert step.latency_ms["p99"] is None
        bound = step.figures.latency_upper_bound_ms["p99"]
        assert bound == max(h["latency_ms"]["p99"] for h in hosts)
        assert step.latency_ms["max"] == max(h["latency_ms"]["max"] for h in hosts)
        assert all(h["start_skew_ms"] is not None for h in hosts)
        assert min(h["start_skew_ms"] for h in hosts) == 0.0
        raw = ramp_dir(plan.out_dir, case) / "raw"
        for host in HOSTS:
            assert "WRK_JSON" in (raw / host / f"step{index:03d}-0.txt").read_text()
        assert (raw / f"step{index:03d}-hosts.json").is_file()
    assert read_run(plan.out_dir) == run
    html = render_html([run], {})
    assert "Load hosts" in html and "all hosts" in html and HOSTS[1] in html


def test_a_connection_ramp_splits_over_the_hosts_own_addresses(
    two_hosts: local.LocalFleetState, tmp_path: Path
) -> None:
    plan, _, case = run_through_the_fleet(
        "smoke", {"scenario": "ws-idle", "connection_ramp.hold_s": 3}, tmp_path
    )
    assert [s.offered for s in case.steps] == [50, 100]
    for step in case.steps:
        hosts = step.figures.hosts
        assert sorted(hosts) == list(HOSTS)
        assert step.achieved == step.offered == sum(h["open"] for h in hosts.values())
        assert step.errors["total"] == 0
    limits = case.summary.limits or {}
    assert limits["agent_sources"] == ["198.51.100.10", "198.51.100.11"]
    assert {h["start_skew_ms"] for h in limits["hosts"].values()} >= {0.0}
    for host in HOSTS:
        assert (ramp_dir(plan.out_dir, case) / "raw" / host / "agent-0.txt").is_file()
    closing = case.summary.closing  # the hosts' agents closed theirs at once, in order
    assert closing is not None and closing["close"] == "orderly"
    assert (closing["connections"], closing["open_after"]) == (100, 0), closing


# ~50 s: in the slow run; the default run covers a fleet's connection ramp (above) and
# bench --ws here (test_bench_ws)
@pytest.mark.slow
def test_bench_ws_holds_its_connections_from_the_hosts_on_workers(
    two_hosts: local.LocalFleetState,
) -> None:
    # harness bench --ws --fleet local:2 --workers 2: both apps on the fleet's bridge
    # address as two processes each, the hosts' agents holding every connection
    from harness.bench_ws import bench_ws_framework
    from harness.fleet.client import open_fleet

    with open_fleet("local:2") as fleet:
        result = bench_ws_framework(
            "aiohttp", server_cpus="0", agent_cpus=None, connections=400, rounds=2,
            hold_s=1.0, open_rate_per_s=400.0, workers=2, fleet=fleet,
        )  # fmt: skip
    assert (result.server_processes, result.load) == (2, "fleet of 2 hosts")
    assert result.ours_held_min == result.minimal_held_min == 400, result.note
    assert result.failed == {"ours": 0, "minimal": 0}
    assert result.memory.ours and result.memory.minimal


def kill_worker_when_its_load_runs(namespace: str, timeout_s: float, killed: list[str]) -> None:
    """SIGKILL the Dask worker of `namespace` once its wrk is running (a lost host)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not killed:
        output = subprocess.run(
            ["ip", "netns", "pids", namespace], capture_output=True, text=True
        ).stdout
        processes = []
        for pid in output.split():
            with contextlib.suppress(psutil.Error):
                processes.append(psutil.Process(int(pid)))
        names = {p.pid: p.name() for p in processes if p.is_running()}
        if "wrk" in names.values():
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    if "dask_worker" in " ".join(process.cmdline()):
                        process.kill()
                        killed.append(namespace)
                        return
        time.sleep(0.1)


# Each driver on a short ramp of its own kind: what a fleet run of it splits and merges.
FLEET_DRIVER_PLANS = {
    # httperf: autobench's rate ramp (the rate and the connections a step opens are split)
    "httperf": ("autobench-vps", {"ramp.low": 100, "ramp.high": 200, "ramp.step": 100,
                                  "ramp.connections_per_step": 200}),
    # ab: a fixed request count per step (split too) at a concurrency
    "ab": ("ab-keepalive", {"scenario": "text", "requests_per_step": 2000, "ramp.start": 20,
                            "ramp.stop": 20}),
    "siege": ("smoke", {"driver": "siege", "ramp.stop": 10, "ramp.duration_s": 1}),
    # oha: open loop at a rate; its HdrHistograms are added, so percentiles merge exactly
    "oha": ("latency", {"ramp.rates": "200,400", "ramp.duration_s": 1,
                        "ramp.connections": 20}),
}  # fmt: skip


@pytest.mark.parametrize("driver", sorted(FLEET_DRIVER_PLANS))
def test_every_driver_splits_its_step_over_the_hosts_and_merges_exactly(
    two_hosts: local.LocalFleetState, driver: str, tmp_path: Path
) -> None:
    require_tools(driver)
    profile_name, overrides = FLEET_DRIVER_PLANS[driver]
    _, _, case = run_through_the_fleet(
        profile_name, {**overrides, "warmup_s": 0, "cooldown_s": 0}, tmp_path
    )
    assert case.steps
    for step in case.steps:
        hosts = step.figures.hosts
        assert [h["host"] for h in hosts] == list(HOSTS)
        assert sum(h["offered"] for h in hosts) == step.offered
        assert all(h["replies"] > 0 for h in hosts)
        assert step.replies == sum(h["replies"] for h in hosts)
        host_errors = sum(n for h in hosts for k, n in h["errors"].items() if k != "driver")
        assert step.errors["total"] == host_errors
        maxima = [h["latency_ms"]["max"] for h in hosts if h["latency_ms"]["max"] is not None]
        assert step.latency_ms["max"] == (max(maxima) if maxima else None)  # httperf: none
        if driver == "ab":  # the request count was split, not repeated on every host
            assert step.figures.complete_requests == 2000
        if driver == "oha":  # histograms added: the merged p99 is read from their sum
            merged = hdr.decode(step.histograms["latency"])
            assert merged.get_total_count() == step.replies + step.errors.get("status", 0)
            assert step.latency_ms["p99"] == hdr.latency_ms(merged)["p99"]
            assert step.figures.latency_upper_bound_ms is None
        else:  # percentiles of parts are not averaged
            assert step.latency_ms["p99"] is None


def test_killing_a_worker_mid_step_fails_that_step_by_name(
    two_hosts: local.LocalFleetState, tmp_path: Path
) -> None:
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            # one 20-second step: the worker dies within its first second or two
            settings={"warmup_s": 0, "ramp.stop": 10, "ramp.duration_s": 20},
            results_dir=tmp_path,
            fleet="local:2",
            verify=False,
        )
    )
    killed: list[str] = []
    killer = threading.Thread(
        target=kill_worker_when_its_load_runs, args=(HOSTS[1], 60.0, killed), daemon=True
    )
    killer.start()
    run = Runner(plan).run()
    killer.join(5)
    assert killed == [HOSTS[1]]
    [case] = run.cases
    assert case.status == "failed"
    assert case.error is not None and f"host {HOSTS[1]} lost" in case.error, case.error
    [step] = case.steps
    assert step.errors.get("aborted") == 1
    assert f"host {HOSTS[1]} lost" in step.figures.driver_error
    # the other host's load was stopped with the step: no wrk left in any namespace
    for namespace in HOSTS:
        output = subprocess.run(
            ["ip", "netns", "pids", namespace], capture_output=True, text=True
        ).stdout
        for pid in output.split():
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(int(pid))
                assert process.name() != "wrk" or process.status() == psutil.STATUS_ZOMBIE


def test_fleet_down_leaves_no_namespace_link_or_process(
    two_hosts: local.LocalFleetState,
) -> None:
    assert namespaces() == list(HOSTS)
    removed = local.fleet_down()
    assert sorted(removed["namespaces"]) == list(HOSTS)
    assert_nothing_left()

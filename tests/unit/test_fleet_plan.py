"""The fleet's pure parts: specs, splits, addresses, merging, refusals (no network)."""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

import pytest

from drivers import histograms as hdr
from drivers.agent.plan import combine_agent_lines, connect_ports, split_schedule
from drivers.base import DriverResult
from harness.compare import check_fleet_plan
from harness.fleet import security
from harness.fleet.agents import host_per_process_limit
from harness.fleet.client import Certified, FleetAccess, LoadHost, parse_fleet
from harness.fleet.local import NETWORK, host_addresses
from harness.fleet.steps import merge_host_results, split_evenly
from harness.fleet.tasks import StepSignals
from harness.server_process import check_listen_address
from model.errors import UserError
from model.step_figures import StepFigures


def test_fleet_specs_parse_and_bad_ones_are_named() -> None:
    assert parse_fleet("local:4").local_hosts == 4
    assert parse_fleet("tls://10.1.2.3:8786").scheduler == "tls://10.1.2.3:8786"
    insecure = parse_fleet("tcp://10.1.2.3:8786", FleetAccess(insecure=True))
    assert insecure.scheduler == "tcp://10.1.2.3:8786" and insecure.insecure
    for bad in ("local:0", "local:x", "tls://nohost", "8786", "udp://a:1", "tls://a"):
        with pytest.raises(UserError, match="fleet"):
            parse_fleet(bad)


def test_a_plain_tcp_fleet_is_refused_without_insecure_fleet() -> None:
    with pytest.raises(UserError, match=r"unencrypted and unauthenticated.*--insecure-fleet"):
        parse_fleet("tcp://10.1.2.3:8786")


def test_a_tls_fleet_needs_the_harness_certificate(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="needs --fleet-ca, --fleet-cert, --fleet-key"):
        check_fleet_plan("tls://10.1.2.3:8786", "wrk", None, FleetAccess())
    ca = security.make_ca(tmp_path / "ca")
    mine = security.issue(ca, "harness", tmp_path / "ca")
    other = security.issue(security.make_ca(tmp_path / "other"), "harness", tmp_path / "other")
    access = FleetAccess(str(mine.ca_path), str(mine.cert_path), str(mine.key_path))
    check_fleet_plan("tls://10.1.2.3:8786", "wrk", None, access)
    crossed = FleetAccess(str(mine.ca_path), str(other.cert_path), str(other.key_path))
    with pytest.raises(UserError, match="not signed by the CA"):
        check_fleet_plan("tls://10.1.2.3:8786", "wrk", None, crossed)
    mismatched = FleetAccess(str(mine.ca_path), str(mine.cert_path), str(other.key_path))
    with pytest.raises(UserError, match="does not load"):
        check_fleet_plan("tls://10.1.2.3:8786", "wrk", None, mismatched)


def test_fleet_keys_are_private_and_the_ca_reloads(tmp_path: Path) -> None:
    directory = tmp_path / "fleet"
    ca = security.load_or_make_ca(directory)
    first = security.issue(ca, "loadgen-1", directory, "10.0.0.2")
    assert directory.stat().st_mode & 0o777 == 0o700
    for key in (first.key_path, directory / security.CA_KEY):
        assert key.stat().st_mode & 0o777 == 0o600
    again = security.load_or_make_ca(directory)  # the same CA: it signs for the same fleet
    second = security.issue(again, "loadgen-2", directory)
    security.check_identity(second)
    assert security.common_name(second.cert_path) == "loadgen-2"


@pytest.mark.parametrize("name", ["../up", "a/b", ".hidden", "", "-x", "x" * 64, "a b"])
def test_a_member_name_that_is_no_plain_name_is_refused(name: str) -> None:
    with pytest.raises(UserError, match="not a plain name"):
        security.check_member_name(name)
    assert LoadHost(name, "tls://198.51.100.10:1", {"harness": "v"}).refusal("v")


@pytest.mark.parametrize(("total", "parts"), [(20, 2), (21, 4), (3, 4), (100_000, 4), (0, 3)])
def test_a_step_splits_exactly_over_the_hosts(total: int, parts: int) -> None:
    shares = split_evenly(total, parts)
    assert sum(shares) == total and len(shares) == parts
    assert max(shares) - min(shares) <= 1


def test_each_hosts_schedule_never_decreases() -> None:
    targets = [1, 2, 3, 5, 8, 13, 21]
    for index in range(4):
        schedule = [split_evenly(t, 4)[index] for t in targets]
        assert schedule == sorted(schedule)


def test_local_host_addresses_stay_in_the_documentation_range() -> None:
    assert ipaddress.ip_network("198.51.100.0/24") == NETWORK
    addresses = [a for index in range(1, 5) for a in host_addresses(index, 4)]
    assert len(set(addresses)) == 16
    assert all(ipaddress.ip_address(a) in NETWORK for a in addresses)
    assert "198.51.100.1" not in addresses  # the bridge's
    with pytest.raises(UserError, match="do not fit"):
        host_addresses(100, 4)


def test_a_hosts_agents_connect_from_its_own_addresses() -> None:
    pool = ("198.51.100.10", "198.51.100.11")
    shares = split_schedule([30_000, 45_000], 19_900, pool)
    assert len(shares) == 3
    assert all(set(share.sources) <= set(pool) for share in shares)
    facts = {"port_range": [32768, 60999], "addresses": list(pool), "nofile_soft": 20_000}
    assert host_per_process_limit(facts) == 19_900
    facts_few_ports = {**facts, "port_range": [60000, 60999], "addresses": pool[:1]}
    assert host_per_process_limit(facts_few_ports) == 400  # its 500 even ports less 100
    assert connect_ports(32768, 60999) == 14_116 and connect_ports(1024, 65535) == 32_256
    assert connect_ports(1, 4) == 2 and connect_ports(2, 2) == 1 and connect_ports(3, 3) == 0


def result(replies: int, p99: float, maximum: float) -> DriverResult:
    return DriverResult(
        replies=replies,
        duration_s=2.0,
        errors={"connect": 0, "timeout": replies // 100},
        latency_ms={"avg": p99 / 2, "p50": p99 / 3, "p90": p99 / 1.5, "p99": p99, "max": maximum},
        figures=StepFigures(requests=replies + 3, bytes_read=replies * 100),
    )


def test_merged_counts_are_exact_and_percentiles_are_not_averaged() -> None:
    parts = [result(1000, 10.0, 30.0), result(3000, 20.0, 25.0)]
    figures = [
        {"host": h, "start_skew_ms": s, "driver_bound": False, "driver_cpu_pct": 40.0}
        for h, s in (("a", 0.0), ("b", 3.5))
    ]
    merged = merge_host_results(parts, figures)
    assert merged.replies == 4000
    assert merged.errors == {"connect": 0, "timeout": 40}
    assert merged.figures.requests == 4006 and merged.figures.bytes_read == 400_000
    assert merged.latency_ms["max"] == 30.0
    assert merged.latency_ms["avg"] == pytest.approx((5.0 * 1000 + 10.0 * 3000) / 4000)
    # never a mean of percentiles: unavailable, bounded above by the largest host's
    assert merged.latency_ms["p99"] is None and merged.latency_ms["p50"] is None
    assert merged.figures.latency_upper_bound_ms["p99"] == 20.0
    assert merged.figures.hosts == figures and merged.figures.start_skew_ms_max == 3.5
    assert merged.driver_cpu_pct == 80.0


def test_hosts_histograms_are_added_and_their_percentiles_read_from_the_sum() -> None:
    """oha keeps HdrHistograms: merging hosts adds them, so the merged p99 is exact."""
    fast = [1000.0] * 990 + [50_000.0] * 10  # µs: 1 % at 50 ms
    slow = [2000.0] * 1000
    parts = [
        dataclasses.replace(
            result(len(values), 1.0, 50.0),
            histograms={"latency": hdr.encode(hdr.histogram_of(values))},
        )
        for values in (fast, slow)
    ]
    figures = [
        {"host": h, "start_skew_ms": 0.0, "driver_bound": False, "driver_cpu_pct": None}
        for h in ("a", "b")
    ]
    merged = merge_host_results(parts, figures)
    whole = hdr.histogram_of(fast + slow)
    assert merged.latency_ms == hdr.latency_ms(whole)
    assert merged.latency_ms["p99"] == pytest.approx(2.0, rel=1e-3)  # 0.5 % above: 2 ms
    assert merged.figures.latency_upper_bound_ms is None


def test_every_driver_but_mcload_runs_on_a_fleet() -> None:
    for driver in ("wrk", "httperf", "ab", "siege", "oha", "agent"):
        check_fleet_plan("local:2", driver, None)
    with pytest.raises(UserError, match="driver mcload does not run on a fleet"):
        check_fleet_plan("local:2", "mcload", None)


def test_a_host_running_another_harness_is_refused() -> None:
    host = LoadHost("h1", "tcp://198.51.100.10:1", {"harness": "0.1.0+src.aaaa"})
    assert host.refusal("0.1.0+src.aaaa") is None
    refusal = host.refusal("0.1.0+src.bbbb")
    assert refusal is not None and "0.1.0+src.aaaa" in refusal and "bbbb" in refusal


def test_step_events_are_named_per_step_and_host() -> None:
    signals = StepSignals("harness/abc/step001")
    names = signals.events(["h1", "h2"])
    assert len(set(names)) == len(names) == 6
    assert signals.ready("h1") != signals.ready("h2") and signals.go in names


def test_host_lines_combine_per_host_and_hold_only_when_all_hold_one_step() -> None:
    line = {"open": 5, "opened": 6, "attempts": 6, "failed": {"refused": 1}, "phase": "holding"}
    lines = {
        "h1/0": {**line, "step": 1, "host": "h1"},
        "h2/0": {**line, "step": 1, "host": "h2"},
        "h2/1": {**line, "step": 1, "host": "h2"},
    }
    combined = combine_agent_lines(lines)
    assert combined["hosts"] == {
        "h1": {"open": 5, "opened": 6, "failed": 1},
        "h2": {"open": 10, "opened": 12, "failed": 2},
    }
    assert combined["phase"] == "holding"
    assert "t" not in combined  # lines without a time: none made up
    lines["h2/1"] = {**line, "step": 2, "host": "h2"}  # one host already holds the next step
    assert combine_agent_lines(lines)["phase"] == "mixed"


def test_combined_lines_are_as_old_as_their_oldest() -> None:
    # every agent was in its phase at the oldest of their newest lines' times
    lines = {
        i: {"open": 1, "step": 0, "phase": "holding", "t": t} for i, t in enumerate((5.5, 4.25))
    }
    assert combine_agent_lines(lines)["t"] == 4.25


@pytest.mark.parametrize(
    "host", ["0", "0.0", "0.0.0.0", "::", "::0", "0:0::0", "", "localhost", "224.0.0.1",
             "255.255.255.255", "ff02::1", "127.1"],
)  # fmt: skip
def test_a_listen_address_is_one_address_written_out(host: str) -> None:
    with pytest.raises(UserError, match="listens on"):
        check_listen_address(host)
    with pytest.raises(UserError, match="--server-address"):
        check_fleet_plan("local:2", "wrk", host)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "198.51.100.1", "10.0.0.5", "fe80::1"])
def test_a_specific_address_may_be_listened_on(host: str) -> None:
    assert check_listen_address(host) == host


def test_a_host_is_judged_by_its_certificate_not_only_its_word() -> None:
    ours = "0.1.0+src.aaaa"
    facts = {"harness": ours}
    certified = Certified("h1", security.version_unit(ours))
    assert LoadHost("h1", "tls://198.51.100.10:1", facts, certified).refusal(ours) is None
    posing = LoadHost("h1", "tls://198.51.100.10:1", facts, Certified("h2", None))
    assert "certificate is 'h2'" in str(posing.refusal(ours))
    older = Certified("h1", security.version_unit("0.1.0+src.bbbb"))
    refusal = LoadHost("h1", "tls://198.51.100.10:1", facts, older).refusal(ours)
    assert refusal is not None and "certificate is for harness 0.1.0+src.bbbb" in refusal

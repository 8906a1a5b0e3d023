"""Shipped profiles load, replay the studies' parameters, and take overrides."""

from __future__ import annotations

import pytest

from drivers import build_driver
from harness.monitor import merge_telemetry
from harness.profile import load_profile, parse_settings, profile_names
from harness.run.http_case import driver_options
from harness.run.rounds import ROUND_WARMUP_S
from model.errors import UserError
from model.ramps import ConcurrencyRamp, ConstantRateRamp, RateRamp


def test_every_shipped_profile_loads() -> None:
    names = profile_names()
    assert {
        "smoke",
        "quick",
        "full",
        "autobench-vps",
        "autobench-dedicated",
        "ab-keepalive",
        "affinity-matrix",
    } <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.description
        assert list(profile.ramp)


def test_study_replicas_keep_their_parameters() -> None:
    vps = load_profile("autobench-vps")
    assert vps.driver == "httperf"
    assert vps.ramp == RateRamp(
        50, 600, 10, calls_per_connection=10, connections_per_step=6000, timeout_s=5
    )
    dedicated = load_profile("autobench-dedicated").ramp
    assert isinstance(dedicated, RateRamp)
    assert (dedicated.low, dedicated.high, dedicated.step) == (50, 1500, 50)
    assert dedicated.connections_per_step == 15000
    ab = load_profile("ab-keepalive")
    assert (ab.driver, ab.requests_per_step, ab.scenario) == ("ab", 10000, "log")
    assert [s.offered for s in ab.ramp] == [2000]
    assert load_profile("affinity-matrix").affinity_modes == ("both", "server", "agent", "none")


def test_quick_profile_plans_twelve_servers_to_a_precision_in_eight_minutes() -> None:
    """The load time the profile asks for, plus the start, verify and stop measured here
    (about 4 s for a ramp's case, 2 s for a round's: README's quick run of twelve took
    268 s with 5 rounds of 2 s): every case's minimum rounds fit in the time budget, and
    the budget leaves the report 30 s within issue 26's 8 minutes."""
    quick = load_profile("quick")
    assert isinstance(quick.ramp, ConcurrencyRamp)
    per_case_s = quick.warmup_s + sum((s.duration_s or 0) + quick.cooldown_s for s in quick.ramp)
    per_round_s = ROUND_WARMUP_S + quick.round_duration_s + quick.cooldown_s
    assert (quick.rounds, quick.precision_pct) == (4, 5.0)
    assert 12 * (per_case_s + 4 + quick.rounds * (per_round_s + 2)) <= quick.max_time_s
    assert quick.max_time_s + 30 <= 8 * 60


def test_overrides_from_the_command_line() -> None:
    profile = load_profile(
        "quick",
        {
            **parse_settings(["ramp.stop=125", "ramp.step=75", "warmup_s=0"]),
            "duration_s": 2,
            "driver": "ab",
            "repeat": None,
        },
    )
    assert [s.offered for s in profile.ramp] == [50, 125]
    assert all(s.duration_s == 2 for s in profile.ramp)
    assert profile.warmup_s == 0 and profile.driver == "ab" and profile.repeat == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"colour": "blue"}, "unknown setting colour"),
        ({"ramp.kind": "spiral"}, "ramp kind 'spiral'"),
        ({"repeat": 0}, "repeat must be at least 1"),
        ({"affinity": "sideways"}, "affinity 'sideways'"),
        ({"multiplexed_connections": 0}, "multiplexed_connections must be at least 1"),
        ({"tls_resumption": "sometimes"}, "tls_resumption must be true, false or"),
    ],
)
def test_bad_overrides_are_named(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_profile("quick", overrides)


def test_worker_telemetry_merges_into_one_row() -> None:
    lines = {
        1: {
            "open": 3,
            "requests": 100,
            "tick_max_ms": 4.0,
            "tick_avg_ms": 1.0,
            "rss_bytes": 10,
            "max_open": 5,
            "gc_pause_ms": 0.5,
        },
        2: {
            "open": 2,
            "requests": 50,
            "tick_max_ms": 9.0,
            "tick_avg_ms": 0.5,
            "rss_bytes": 20,
            "max_open": 4,
            "gc_pause_ms": 0.1,
        },
    }
    merged = merge_telemetry(lines)
    assert merged["workers"] == 2
    assert merged["open"] == 5 and merged["requests"] == 150 and merged["max_open"] == 9
    assert merged["tick_max_ms"] == 9.0 and merged["tick_avg_ms"] == 1.0
    assert merged["telemetry_rss_bytes"] == 30
    assert merge_telemetry({}) == {}


def test_latency_profile_offers_every_framework_the_same_rates_up_to_saturation() -> None:
    latency = load_profile("latency")
    assert latency.driver == "oha"
    assert isinstance(latency.ramp, ConstantRateRamp)
    assert latency.ramp.stop_when_saturated
    rates = [step.offered for step in latency.ramp]
    assert rates[0] == 500 and rates == sorted(rates) and max(rates) >= 20_000
    shorter = load_profile("latency", parse_settings(["ramp.rates=1000,2000", "ramp.duration_s=2"]))
    assert [(s.offered, s.duration_s) for s in shorter.ramp] == [(1000.0, 2), (2000.0, 2)]


def test_h2_profile_runs_1_10_and_100_streams_over_10_connections() -> None:
    profile = load_profile("h2")
    assert (profile.driver, profile.protocols) == ("h2load", ("h2",))
    options = driver_options(profile)  # what the run hands the driver
    assert options["multiplexed_connections"] == 10
    driver = build_driver(profile.driver, profile.ramp, 1, options)
    shapes = [driver.shape(step) for step in profile.ramp]  # type: ignore[attr-defined]
    assert shapes == [(10, 1), (10, 10), (10, 100)]


def test_handshakes_profiles_differ_only_in_resumption() -> None:
    full, resumed = load_profile("handshakes"), load_profile("handshakes-resumed")
    assert (full.driver, full.protocols, full.tls_resumption) == ("handshakes", ("h1-tls",), "both")
    assert driver_options(full)["tls_resumption"] == "both"  # full, then resumed, per step
    assert resumed.tls_resumption is True
    assert driver_options(resumed)["tls_resumption"] is True
    assert [s.offered for s in full.ramp] == [s.offered for s in resumed.ramp] == [1, 2, 4]
    keep = {"name", "description", "tls_resumption"}
    assert {k: v for k, v in full.to_dict().items() if k not in keep} == {
        k: v for k, v in resumed.to_dict().items() if k not in keep
    }

"""Shipped profiles load, replay the studies' parameters, and take overrides."""

from __future__ import annotations

import pytest

from drivers import build_driver
from harness.monitor import merge_telemetry
from harness.profile import load_profile, parse_settings, profile_names
from harness.run.http_case import driver_options
from harness.run.rounds import ROUND_WARMUP_S
from model.errors import UserError
from model.ramps import (
    RAMP_KINDS,
    ConcurrencyRamp,
    ConstantRateRamp,
    RateRamp,
    kinds_taking,
    ramp_keys,
)


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
    the budget leaves the report 30 s within the quick profile's 8 minutes."""
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


# a shipped profile of each ramp kind
PROFILE_OF_KIND = {
    "concurrency": "quick",
    "rate": "autobench-vps",
    "connections": "ws-ramp",
    "constant-rate": "latency",
    "h2-attacks": "h2-attacks",
}
FOREIGN_RAMP_KEYS = [
    (kind, key)
    for kind in RAMP_KINDS
    for other in RAMP_KINDS
    for key in ramp_keys(other)
    if key not in ramp_keys(kind)
]


def test_every_ramp_kind_has_a_shipped_profile() -> None:
    assert set(PROFILE_OF_KIND) == set(RAMP_KINDS)
    for kind, name in PROFILE_OF_KIND.items():
        assert load_profile(name).ramp.kind == kind


@pytest.mark.parametrize(("kind", "key"), sorted(set(FOREIGN_RAMP_KEYS)))
def test_a_ramp_key_of_another_kind_is_one_line_that_says_what_to_use(kind: str, key: str) -> None:
    """Every --set key of every ramp kind, fed to a profile whose ramp is another kind:
    one line naming the profile, the --set, the ramp in use and the keys it takes, and a
    remedy that works — a shipped profile whose ramp does take the key."""
    name = PROFILE_OF_KIND[kind]
    with pytest.raises(UserError) as raised:
        load_profile(name, parse_settings([f"ramp.{key}=5"]))
    message = str(raised.value)
    assert "\n" not in message
    keys = ", ".join(ramp_keys(kind))
    assert message.startswith(
        f"profile {name}: --set ramp.{key}=5: its ramp is a {kind} ramp ({keys})"
    ), message
    assert "__init__" not in message and "unexpected keyword" not in message
    suggested = message.split("--profile ", 1)[1].split(" ", 1)[0].rstrip(",")
    assert load_profile(suggested).ramp.kind in kinds_taking(key), message


def test_the_issues_websocket_mistake_gets_the_connection_ramp_and_ws_ramp() -> None:
    """`harness compare --scenario ws-idle --set ramp.hold_s=5` with the default profile."""
    overrides = {**parse_settings(["ramp.hold_s=5"]), "scenario": "ws-idle"}
    with pytest.raises(UserError) as raised:
        load_profile("quick", overrides)
    keys = ", ".join(ramp_keys("concurrency"))  # start, stop, step, duration_s, ...
    assert str(raised.value) == (
        f"profile quick: --set ramp.hold_s=5: its ramp is a concurrency ramp ({keys}); "
        "hold_s is a key of a connections ramp: use --set "
        "connection_ramp.hold_s=5 (this profile's connections ramp, which WebSocket "
        "scenarios run), or --profile ws-close-storm (or ws-ramp, ws-load-10k, ws-stress), "
        "whose ramp takes hold_s"
    )
    # and the remedy runs
    profile = load_profile("quick", {"connection_ramp.hold_s": "5", "scenario": "ws-idle"})
    assert profile.ramp.kind == "connections" and profile.ramp.hold_s == 5


@pytest.mark.parametrize(
    ("profile", "setting", "message"),
    [
        ("quick", "ramp.dration_s=3", "use --set ramp.duration_s=…"),
        ("ws-ramp", "ramp.duration_s=3", "use --set ramp.hold_s=3 (its step length)"),
        ("ws-ramp", "ramp.start=abc", "connections ramp: start must be a number, not 'abc'"),
        ("quick", "warmup=1", "unknown setting warmup (did you mean warmup_s?): it takes "),
    ],
)
def test_near_misses_are_named(profile: str, setting: str, message: str) -> None:
    with pytest.raises(UserError) as raised:
        load_profile(profile, parse_settings([setting]))
    assert message in str(raised.value) and "\n" not in str(raised.value)

"""RunOptions and its precedence: built-in defaults < profile < --set < named options."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.profile import Profile, load_profile, parse_settings, setting_keys
from harness.run_options import PROFILE_OPTIONS, RunOptions, merge_overrides
from model.errors import UsageError, UserError

# one valid --set value (as the command line gives it) for every profile option's key
SET_VALUES = {
    "scenario": "log",
    "sink": "file",
    "driver": "oha",
    "repeat": "2",
    "duration_s": "1",
    "affinity": "none",
    "process_model": "workers:2",
    "protocol": "h1-tls",
    "loop": "uvloop",
    "mongo_w": "0",
    "mongo_batch": "5",
    "durable": "true",
    "connections": "100",
    "mode": "stress",
    "precision_pct": "5",
    "max_time_s": "60",
    "thresholds": "*: errors == 0",
}


@pytest.fixture
def profile_file(tmp_path: Path) -> Path:
    """A profile that sets warmup_s and the sink and leaves cooldown_s to the default."""
    path = tmp_path / "mine.toml"
    path.write_text(
        'description = "a test profile"\nscenario = "text"\ndriver = "wrk"\n'
        'sink = "file"\nwarmup_s = 2\n\n'
        '[ramp]\nkind = "concurrency"\nstart = 10\nstop = 20\nstep = 10\nduration_s = 2\n'
    )
    return path


def loaded(options: RunOptions) -> Profile:
    return load_profile(options.profile, options.profile_overrides())


def test_every_profile_option_has_a_set_value_here() -> None:
    assert set(SET_VALUES) == set(PROFILE_OPTIONS)
    assert set(PROFILE_OPTIONS) <= set(setting_keys())


def test_the_profile_is_over_the_built_in_defaults(profile_file: Path) -> None:
    profile = loaded(RunOptions(profile=str(profile_file)))
    assert profile.warmup_s == 2 != Profile.warmup_s  # the profile's
    assert profile.sink == "file" != Profile.sink
    assert profile.cooldown_s == Profile.cooldown_s == 1.0  # not in the profile: the default


def test_set_is_over_the_profile(profile_file: Path) -> None:
    settings = parse_settings(["warmup_s=0", "sink=empty", "ramp.stop=30"])
    profile = loaded(RunOptions(profile=str(profile_file), settings=settings))
    assert (profile.warmup_s, profile.sink) == (0, "empty")
    assert [step.offered for step in profile.ramp] == [10, 20, 30]


def test_named_options_are_over_set(profile_file: Path) -> None:
    settings = parse_settings(["sink=empty", "repeat=2", "duration_s=1", "ramp.duration_s=3"])
    options = RunOptions(
        profile=str(profile_file), settings=settings, sink="mongo", repeat=3, duration_s=4
    )
    assert options.profile_overrides() == {
        "ramp.duration_s": "3",
        "sink": "mongo",
        "repeat": 3,
        "duration_s": 4,
    }
    assert list(options.profile_overrides())[-1] == "duration_s"  # applied last
    profile = loaded(options)
    assert (profile.sink, profile.repeat) == ("mongo", 3)
    assert all(step.duration_s == 4 for step in profile.ramp)  # --duration over ramp.*


def test_a_named_option_left_unset_never_overrides_set() -> None:
    """Each option unset (None, as typer gives it) keeps the --set value: the bug where
    `--set sink=file` ran the profile's sink."""
    options = RunOptions(profile="smoke", settings=SET_VALUES)
    assert all(getattr(options, key) in (None, ()) for key in PROFILE_OPTIONS)
    assert options.profile_overrides() == SET_VALUES


def test_set_scenario_and_sink_reach_the_profile() -> None:
    profile = loaded(
        RunOptions(profile="smoke", settings=parse_settings(["scenario=log", "sink=file"]))
    )
    assert (profile.scenario, profile.sink) == ("log", "file")
    durable = loaded(RunOptions(profile="smoke", settings={"sink": "file", "durable": "true"}))
    assert durable.durable is True


@pytest.mark.parametrize(
    ("settings", "options", "merged"),
    [
        ({}, {"sink": None}, {}),
        ({"sink": "file"}, {"sink": None}, {"sink": "file"}),
        ({"sink": "file"}, {"sink": "mongo"}, {"sink": "mongo"}),
        ({}, {"durable": False}, {"durable": False}),  # given: False is a value, None is not
        ({"thresholds": "a: peak > 1"}, {"thresholds": ()}, {"thresholds": "a: peak > 1"}),
        (
            {"thresholds": "a: peak > 1"},
            {"thresholds": ("b: peak > 2",)},
            {"thresholds": ["a: peak > 1", "b: peak > 2"]},  # added, not put in its place
        ),
    ],
)
def test_merge_overrides(
    settings: dict[str, object], options: dict[str, object], merged: dict[str, object]
) -> None:
    assert merge_overrides(settings, options) == merged


def test_threshold_rules_add_up_from_profile_set_and_options() -> None:
    options = RunOptions(
        profile="smoke",
        settings={"thresholds": "*: errors == 0"},
        thresholds=("aiohttp: peak >= 10",),
    )
    assert loaded(options).thresholds == ("*: errors == 0", "aiohttp: peak >= 10")


def test_an_unknown_set_key_is_a_usage_error_listing_the_keys() -> None:
    with pytest.raises(UsageError) as raised:
        RunOptions(settings=parse_settings(["nonsense=1"]))
    message = str(raised.value)
    assert raised.value.exit_status == 2
    assert message.startswith("--set nonsense=1: unknown key nonsense; keys: ")
    assert "\n" not in message
    listed = message.split("; keys: ")[1].split(", ")
    assert listed == list(setting_keys())
    assert {"scenario", "sink", "driver", "ramp.stop", "connection_ramp.hold_s"} <= set(listed)


def test_a_near_miss_is_named() -> None:
    with pytest.raises(
        UsageError, match=r"unknown key ramp.dration_s \(did you mean ramp.duration_s\?\)"
    ):
        RunOptions(settings={"ramp.dration_s": "3"})
    with pytest.raises(UsageError, match=r"unknown key warmup \(did you mean warmup_s\?\)"):
        RunOptions(settings={"warmup": "1"})


def test_a_pair_without_equals_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"'ramp\.step' is not key=value"):
        parse_settings(["ramp.step"])


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("repeat=abc", "--set repeat=abc: repeat takes a whole number"),
        ("warmup_s=soon", "--set warmup_s=soon: warmup_s takes a number"),
        ("durable=yes", "--set durable=yes: durable takes true or false"),
        ("multiplexed_connections=x", "multiplexed_connections takes a whole number"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line(setting: str, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        loaded(RunOptions(profile="smoke", settings=parse_settings([setting])))
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_set_values_take_their_fields_type() -> None:
    profile = loaded(
        RunOptions(
            profile="smoke",
            settings=parse_settings(
                ["description=2026", "warmup_s=0", "tls_resumption=both", "loop=uvloop"]
            ),
        )
    )
    assert profile.description == "2026"  # a str field stays text
    assert profile.warmup_s == 0.0 and isinstance(profile.warmup_s, float)
    assert (profile.tls_resumption, profile.loop) == ("both", "uvloop")


def test_a_bad_value_in_range_is_still_the_profiles_one_line() -> None:
    with pytest.raises(UserError, match="repeat must be at least 1") as raised:
        loaded(RunOptions(profile="smoke", settings={"repeat": "0"}))
    assert not isinstance(raised.value, UsageError)  # a value out of range: exit status 1


def test_options_are_frozen_and_their_collections_immutable() -> None:
    options = RunOptions(
        settings={"sink": "file"}, servers=["a=cmd"], thresholds=["*: errors == 0"]
    )
    assert options.servers == ("a=cmd",) and options.thresholds == ("*: errors == 0",)
    with pytest.raises(AttributeError):
        options.sink = "mongo"  # type: ignore[misc]
    with pytest.raises(TypeError):
        options.settings["sink"] = "mongo"  # type: ignore[index]


def test_a_bad_threshold_is_named_as_the_user_wrote_it() -> None:
    with pytest.raises(UserError, match="--threshold: "):
        RunOptions(thresholds=("aiohttp: peak",))

"""Rounds until the estimate is stable (harness.run.precision, analysis.with_rounds with a
precision, the profile's settings). Pure functions: no server, no clock."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.monitor import StepWindow, replies_per_second
from harness.profile import load_profile
from harness.run.analysis import usable_rounds, with_rounds
from harness.run.precision import (
    MIN_PRECISE_ROUNDS,
    case_precise,
    exclusion_note,
    fit_lengths,
    half_width_pct,
    noise_source,
    round_exclusions,
    round_fits,
    round_length_s,
    round_warmup_s,
    rounds_needed,
    stalled_seconds,
    still_running,
    still_warming,
)
from model.errors import UserError
from model.results import Case, Run, Summary, read_run, write_run
from model.step_figures import figures_from_dict
from tests.helpers import one_step_case
from tests.unit.test_rounds_and_intervals import step


def timed(achieved: float, per_s: list[float], **extra: object) -> object:
    """A round step with its per-second replies (and any other figures)."""
    one = step(achieved, flags=tuple(extra.pop("flags", ())))  # type: ignore[arg-type]
    return dataclasses.replace(one, figures=figures_from_dict({"replies_per_s": per_s, **extra}))


def test_the_half_width_is_a_share_of_the_mean() -> None:
    # mean 11, half-width 1.963 (t 2.776 × 1.581 / √5): 17.8 %
    assert half_width_pct([10.0, 12.0, 11.0, 13.0, 9.0]) == pytest.approx(17.85, abs=0.01)
    assert half_width_pct([5.0]) is None


def test_a_case_is_precise_only_with_three_rounds_within_the_width() -> None:
    assert not case_precise([1000.0, 1001.0], 5.0)  # narrow, but two rounds
    assert case_precise([1000.0, 1010.0, 990.0], 5.0)
    assert not case_precise([1000.0, 1300.0, 800.0], 5.0)
    assert MIN_PRECISE_ROUNDS == 3


def test_rounds_needed_grow_with_the_square_of_the_width() -> None:
    values = [1000.0, 1100.0, 900.0, 1050.0]  # ±11.9 %
    width = half_width_pct(values)
    assert width is not None and width > 10
    assert rounds_needed(values, width / 2) == pytest.approx(16, abs=1)
    assert rounds_needed([1000.0, 1001.0, 1000.5], 5.0) == 3


def test_the_stopping_rule_runs_every_case_to_the_minimum_then_only_imprecise_ones() -> None:
    peaks = {"nginx": [1000.0, 1001.0, 999.0], "gevent": [1000.0, 1300.0, 800.0]}
    common = {"min_rounds": 3, "max_rounds": 10, "precision_pct": 5.0}
    assert still_running(peaks, index=2, **common) == ["nginx", "gevent"]
    assert still_running(peaks, index=3, **common) == ["gevent"]
    assert still_running(peaks, index=10, **common) == []
    # without a precision the minimum is the count
    assert still_running(peaks, index=3, min_rounds=3, max_rounds=3, precision_pct=None) == []


def test_a_round_runs_only_if_it_ends_within_the_budget() -> None:
    assert round_fits(elapsed_s=400.0, round_cost_s=40.0, budget_s=450.0)
    assert not round_fits(elapsed_s=420.0, round_cost_s=40.0, budget_s=450.0)
    assert round_fits(elapsed_s=1e6, round_cost_s=40.0, budget_s=None)


def test_rounds_lengthen_when_the_wander_within_them_explains_the_spread() -> None:
    # per-second replies wander ±20 % and the round means spread about as 2-s means would:
    # longer rounds are the cheaper way to a precision
    wandering = [
        timed(1000.0, [800.0, 1200.0]),
        timed(1100.0, [1300.0, 900.0]),
        timed(950.0, [750.0, 1150.0]),
    ]
    assert round_length_s(wandering, base_s=2.0, overhead_s=3.0) == 8.0  # the cap: 4 × 2 s
    # steady within rounds, spread between them: each start settles apart, length won't help
    settling = [
        timed(1000.0, [1000.0, 1001.0]),
        timed(1200.0, [1200.0, 1199.0]),
        timed(900.0, [900.0, 901.0]),
    ]
    assert round_length_s(settling, base_s=2.0, overhead_s=3.0) == 2.0
    # a dip in one round of three (a GC every ~9 s): rounds cover one period
    periodic = [
        timed(1000.0, [1000.0, 1002.0]),
        timed(900.0, [1000.0, 700.0]),
        timed(1001.0, [1001.0, 1000.0]),
    ]
    assert round_length_s(periodic, base_s=2.0, overhead_s=3.0) == 8.0  # 9 s, capped at 4 × 2
    assert round_length_s(periodic, base_s=3.0, overhead_s=3.0) == 9.0
    # no per-second replies (a server without telemetry): the profile's length
    assert round_length_s([step(1000.0), step(1100.0)], base_s=2.0, overhead_s=3.0) == 2.0
    # whole seconds, for wrk (`-d5.8s` is its usage error): a 5.8 s period takes 6 s rounds
    assert round_length_s(periodic, base_s=1.45, overhead_s=3.0) == 6.0


def test_a_stall_is_a_second_far_below_the_rounds_median() -> None:
    assert stalled_seconds(timed(900.0, [1000.0, 1010.0, 300.0, 990.0])) == [2]  # type: ignore[arg-type]
    assert stalled_seconds(timed(1000.0, [1000.0, 900.0, 1100.0])) == []  # type: ignore[arg-type]


def test_outlier_rounds_are_kept_out_with_their_reason() -> None:
    rounds = [
        timed(1000.0, [1000.0, 1000.0, 1000.0], round=0),
        timed(700.0, [1000.0, 200.0, 1000.0], round=1),  # a stall
        timed(600.0, [600.0, 600.0], round=2, flags=("contended",)),
        timed(1010.0, [1010.0, 1010.0], round=3),
        timed(990.0, [990.0, 990.0], round=4),
    ]
    excluded = round_exclusions(rounds)  # type: ignore[arg-type]
    assert [e.round for e in excluded] == [1, 2]
    assert excluded[0].reason.startswith("stall: 1 s below 50 %")
    assert excluded[1].reason.startswith("contended")
    assert [s.achieved for s in usable_rounds(rounds)] == [1000.0, 1010.0, 990.0]  # type: ignore[arg-type]


def test_stalls_in_many_rounds_are_the_servers_own_and_kept() -> None:
    rounds = [timed(800.0, [1000.0, 200.0, 1000.0], round=i) for i in range(3)]
    rounds.append(timed(1000.0, [1000.0, 1000.0], round=3))
    assert round_exclusions(rounds) == []  # type: ignore[arg-type]


def test_nothing_is_excluded_when_fewer_than_two_would_remain_and_the_case_says_so() -> None:
    rounds = [
        timed(1000.0, [1000.0], round=0, flags=("contended",)),
        timed(1000.0, [1000.0], round=1, flags=("contended",)),
        timed(1000.0, [1000.0], round=2),
    ]
    assert round_exclusions(rounds) == []  # type: ignore[arg-type]
    assert exclusion_note(rounds) == (  # type: ignore[arg-type]
        "2 of 3 rounds were contended: too few others to leave them out, all kept"
    )
    # a round the load generator limited counts: leaving it out would bias the figure
    bound = [timed(1000.0, [1000.0], round=i, flags=("driver_bound",)) for i in range(3)]
    assert round_exclusions(bound) == [] and exclusion_note(bound) is None  # type: ignore[arg-type]


def test_the_noise_source_names_the_machine_the_driver_or_the_server() -> None:
    machine = [
        timed(1000.0, [1000.0, 1000.0], flags=("contended",), other_cpu_pct={"server": 40.0}),
        timed(1200.0, [1200.0, 1200.0]),
        timed(800.0, [800.0, 800.0], flags=("cpu_contended",)),
    ]
    assert noise_source(machine)[0] == "machine"  # type: ignore[arg-type]
    assert "up to 40 %" in noise_source(machine)[1]  # type: ignore[arg-type]
    driver = [timed(1000.0, [1000.0, 1000.0], agent_cpu_wait_pct=25.0) for _ in range(3)]
    assert noise_source(driver)[0] == "load generator"  # type: ignore[arg-type]
    wander = [timed(1000.0, [700.0, 1300.0]), timed(1100.0, [900.0, 1300.0])]
    source, reason = noise_source(wander)  # type: ignore[arg-type]
    assert source == "server" and "wander" in reason
    settle = [timed(1000.0, [1000.0, 1001.0]), timed(1300.0, [1300.0, 1301.0])]
    assert "settling" in noise_source(settle)[1]  # type: ignore[arg-type]
    assert noise_source([step(1000.0), step(1200.0)])[0] == "unknown"


def test_rounds_the_machine_took_name_the_machine_even_when_kept_out() -> None:
    # a quick compare beside a busy neighbour: 3 of 5 rounds contended and kept out, the
    # 2 left wander a little; the case is imprecise because of the machine, not the server
    contended = [
        timed(900.0, [900.0, 900.0], round=i, flags=("contended",), other_cpu_pct={"x": 70.0})
        for i in range(3)
    ]
    quiet = [timed(1000.0, [880.0, 1120.0], round=3), timed(1150.0, [1000.0, 1300.0], round=4)]
    used = quiet  # what usable_rounds leaves
    assert noise_source(used)[0] == "server"  # type: ignore[arg-type]  (the old reading)
    source, reason = noise_source([*contended, *quiet], used)  # type: ignore[arg-type]
    assert source == "machine" and "3 of 5 rounds (up to 70 % of a core)" in reason


def test_a_server_still_warming_at_the_rounds_start_gets_a_longer_warm_up() -> None:
    warming = [timed(1000.0, [600.0, 1000.0, 1000.0]) for _ in range(3)]
    assert still_warming(warming)  # type: ignore[arg-type]
    assert round_warmup_s(warming, base_s=0.5, profile_warmup_s=1.0) == 1.0  # type: ignore[arg-type]
    warm = [timed(1000.0, [1000.0, 1000.0, 1000.0]) for _ in range(3)]
    assert round_warmup_s(warm, base_s=0.5, profile_warmup_s=1.0) == 0.5  # type: ignore[arg-type]


def test_per_second_replies_come_from_the_telemetry_counter_inside_the_window() -> None:
    lines = [
        {"t": 99.5, "pid": 1, "requests": 0},  # before the window: only its difference counts
        {"t": 100.5, "pid": 1, "requests": 1000},  # straddles the start: left out
        {"t": 101.5, "pid": 1, "requests": 2100},
        {"t": 102.5, "pid": 1, "requests": 3000},
        {"t": 101.6, "pid": 2, "requests": 50},  # a second worker, summed by second
        {"t": 102.6, "pid": 2, "requests": 150},
        {"t": 103.5, "pid": 1, "requests": 4000},  # straddles the end: left out
    ]
    window = StepWindow(index=0, started=100.0, ended=103.0)
    assert replies_per_second(lines, window) == [1100.0, 1000.0]
    assert replies_per_second([], window) == []


def rounds_of(values: list[float]) -> Case:
    ramp = one_step_case(
        "gevent", step(1000.0), Summary(peak=1000.0, peak_offered=50, p99_at_peak_ms=5.0)
    )
    measured = [
        (i, dataclasses.replace(ramp, steps=(timed(v, [v, v], round_s=4.0),)))  # type: ignore[arg-type]
        for i, v in enumerate(values)
    ]
    return with_rounds(ramp, measured, 5.0)


def test_with_a_precision_a_wide_case_is_imprecise_and_says_why() -> None:
    wide = rounds_of([1000.0, 1300.0, 800.0, 1100.0]).summary
    assert "imprecise" in wide.flags
    assert wide.half_width_pct is not None and wide.half_width_pct > 5
    assert wide.imprecise_reason == (f"±{wide.half_width_pct:.1f} % after 4 rounds, asked ±5 %")
    assert wide.noise_source == "server" and wide.noise_note
    assert (wide.precision_pct, wide.round_duration_s) == (5.0, 4.0)
    narrow = rounds_of([1000.0, 1010.0, 990.0]).summary
    assert "imprecise" not in narrow.flags and narrow.imprecise_reason is None
    assert narrow.half_width_pct is not None and narrow.half_width_pct < 5


def test_the_summary_refuses_an_imprecise_flag_without_its_reason() -> None:
    with pytest.raises(ValueError, match="imprecise"):
        Summary(flags=("imprecise",))
    with pytest.raises(ValueError, match="noise_source"):
        Summary(noise_source="cosmic rays")
    with pytest.raises(ValueError, match="rounds_excluded"):
        Summary(rounds_excluded=({"round": 1},))


def test_a_summary_with_precision_reads_back_equal(tmp_path: Path) -> None:
    summary = dataclasses.replace(
        rounds_of([1000.0, 1300.0, 800.0]).summary,
        rounds_excluded=({"round": 2, "reason": "contended: ..."},),
    )
    case = dataclasses.replace(rounds_of([1000.0]), summary=summary)
    run = Run("r1", "2026-12-01T00:00:00Z", None, {"cores": 2}, {}, {}, (case,))
    write_run(run, tmp_path)
    assert read_run(tmp_path) == run
    assert read_run(tmp_path).cases[0].summary.rounds_excluded[0]["round"] == 2


def test_profiles_check_the_precision_settings() -> None:
    quick = load_profile("quick")
    assert quick.precision_pct == 5.0 and quick.max_time_s > 0
    with pytest.raises(UserError, match="precision_pct"):
        load_profile("quick", {"precision_pct": 150})
    with pytest.raises(UserError, match="max_rounds"):
        load_profile("quick", {"max_rounds": 1})
    # --precision on a profile without rounds: the precision's minimum
    assert load_profile("smoke", {"precision_pct": "5"}).rounds == MIN_PRECISE_ROUNDS


def test_bench_ratios_are_paired_and_rounds_go_on_until_the_ratio_is_precise() -> None:
    from harness.bench import bench_continues, bench_summary

    # both apps drift together; ours is 80 % of the minimal app in every round
    minimal = [10000.0, 9000.0, 11000.0, 9500.0]
    ours = [0.8 * m for m in minimal]
    result = bench_summary("gevent", None, ours, minimal, 3.0)
    assert result.ratio == pytest.approx(0.8)
    assert result.ratio_ci == (0.8, 0.8) and result.imprecise_reason is None
    assert result.ours_per_round == (8000.0, 7200.0, 8800.0, 7600.0)  # each round's, in order
    assert result.minimal_per_round == tuple(minimal)
    common = {"min_rounds": 3, "max_rounds": 10, "elapsed_s": 0.0, "round_s": 5.0}
    assert not bench_continues(ours, minimal, precision_pct=3.0, max_time_s=100.0, **common)
    wobbly = [8000.0, 9500.0, 7000.0, 9900.0]
    assert bench_continues(wobbly, minimal, precision_pct=3.0, max_time_s=100.0, **common)
    assert not bench_continues(wobbly, minimal, precision_pct=3.0, max_time_s=4.0, **common)
    assert not bench_continues(wobbly, minimal, precision_pct=None, max_time_s=None, **common)
    assert bench_continues(wobbly[:2], minimal[:2], precision_pct=None, max_time_s=0.0, **common)
    short = bench_summary("gevent", None, wobbly, minimal, 3.0)
    assert short.imprecise_reason is not None and short.imprecise_reason.endswith("asked ±3 %")
    assert short.half_width_pct is not None and short.half_width_pct > 3


def test_longer_rounds_are_shortened_alike_to_leave_room_for_more_rounds() -> None:
    chosen = {"gevent": 8.0, "nginx": 2.0}
    overhead = {"gevent": 3.0, "nginx": 3.0}
    assert fit_lengths(chosen, overhead, base_s=2.0, remaining_s=None) == chosen
    assert fit_lengths(chosen, overhead, base_s=2.0, remaining_s=100.0) == chosen  # 2 × 16 s
    # room for 2 more rounds of 5 + 5 s at the base length, and 2 s more each: gevent 4 s
    assert fit_lengths(chosen, overhead, base_s=2.0, remaining_s=24.0) == {
        "gevent": 4.0,
        "nginx": 2.0,
    }
    assert fit_lengths(chosen, overhead, base_s=2.0, remaining_s=5.0)["gevent"] == 2.0


def test_a_run_to_a_precision_ends_with_one_line_naming_the_cases_that_stopped_short() -> None:
    from harness.outputs.console import precision_line

    wide = dataclasses.replace(rounds_of([1000.0, 1300.0, 800.0, 1100.0]), framework="gevent")
    narrow = dataclasses.replace(rounds_of([1000.0, 1010.0, 990.0]), framework="nginx")
    run = Run("r1", "2026-12-01T00:00:00Z", None, {}, {}, {}, (wide, narrow))
    line = precision_line(run)
    assert line is not None and line.startswith("precision: 1 of 2 cases within the ±% asked")
    assert f"gevent {wide.summary.imprecise_reason}, noise from the server" in line
    assert precision_line(dataclasses.replace(run, cases=())) is None

"""Confirmation rounds and what is made of them: intervals, paired ratios, the ranking that
admits ties, the verdict sentence, the diff statistics (harness.stats, harness.run.rounds,
harness.run.analysis, harness.run.verdict). Pure functions: no server, no clock."""

from __future__ import annotations

import dataclasses
import math

import pytest

from harness.profile import load_profile
from harness.run.analysis import (
    round_ratio,
    rounds_offered,
    trial_choice,
    trial_loads,
    trial_note,
    with_baseline_ratios,
    with_rounds,
)
from harness.run.rounds import fixed_ramp, rotated
from harness.run.verdict import rank, verdict
from harness.stats import (
    bootstrap_ratio_interval,
    holm_adjusted,
    mann_whitney_p,
    mean_interval,
    paired_ratio_interval,
    welch_log_p,
)
from model.errors import UserError
from model.ramps import ConcurrencyRamp, RateRamp
from model.results import Case, Step, Summary
from model.step_figures import StepFigures
from tests.helpers import one_step_case, synthetic_latency_ms


def test_the_mean_interval_is_students_t() -> None:
    interval = mean_interval([10.0, 12.0, 11.0, 13.0, 9.0])
    assert interval is not None
    # mean 11, s = 1.5811, t(0.975, 4) = 2.7764: half-width 1.963
    assert interval.value == pytest.approx(11.0)
    assert (interval.low, interval.high) == pytest.approx((9.037, 12.963), abs=1e-3)
    assert mean_interval([5.0]) is None


def test_a_paired_ratio_cancels_drift_that_an_unpaired_one_would_not() -> None:
    # both frameworks drift down together round by round; A is always 1.25× B
    first = [1250.0, 1000.0, 750.0, 500.0]
    second = [1000.0, 800.0, 600.0, 400.0]
    paired = paired_ratio_interval(first, second)
    assert paired is not None
    assert paired.value == pytest.approx(1.25)
    assert paired.high - paired.low == pytest.approx(0.0, abs=1e-9)
    unpaired = bootstrap_ratio_interval(first, second)
    assert unpaired is not None and not unpaired.excludes(1.0)  # drift hides it


def test_mann_whitney_separates_disjoint_rounds_and_not_overlapping_ones() -> None:
    assert mann_whitney_p([10, 11, 12, 13, 14], [20, 21, 22, 23, 24]) == pytest.approx(
        0.0079, abs=1e-3
    )
    assert mann_whitney_p([10, 20, 12, 22, 14], [11, 21, 13, 23, 15]) > 0.5
    assert mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert mann_whitney_p([1.0], [2.0, 3.0]) is None


def test_the_bootstrap_is_seeded() -> None:
    a, b = [10.0, 11.0, 12.5, 9.5], [8.0, 8.5, 9.0, 7.5]
    assert bootstrap_ratio_interval(a, b) == bootstrap_ratio_interval(a, b)


def test_a_round_is_the_ramp_at_one_load() -> None:
    ramp = fixed_ramp(ConcurrencyRamp(start=50, stop=250, step=100, duration_s=5), 150, 3.0)
    assert [(s.offered, s.duration_s) for s in ramp] == [(150, 3.0)]
    listed = fixed_ramp(ConcurrencyRamp(levels=(10, 100, 1000), duration_s=2), 100, 3.0)
    assert [(s.offered, s.duration_s) for s in listed] == [(100, 3.0)]
    rate = fixed_ramp(RateRamp(low=1000, high=5000, step=1000), 3000.0, 3.0)
    assert [(s.offered, s.duration_s) for s in rate] == [(3000.0, 3.0)]
    assert rotated(["a", "b", "c"], 1) == ["b", "c", "a"]  # type: ignore[list-item]
    assert rotated(["a", "b", "c"], 3) == ["a", "b", "c"]  # type: ignore[list-item]


def ramp_case(*readings: tuple[int, float], flags: tuple[str, ...] = ()) -> Case:
    """A concurrency ramp's ok case read `(concurrency, req/s)` at each step."""
    steps = tuple(
        dataclasses.replace(step(achieved, flags=flags), offered=level)
        for level, achieved in readings
    )
    best = max(steps, key=lambda s: s.achieved)
    summary = Summary(peak=best.achieved, peak_offered=best.offered, p99_at_peak_ms=5.0)
    return dataclasses.replace(one_step_case("gevent", steps[0], summary), steps=steps)


def test_rounds_run_at_the_plateaus_first_point_not_at_a_noisy_best() -> None:
    # gevent's two readings 3 % apart (noise): its rounds at 50, in either order
    assert rounds_offered(ramp_case((50, 12_177.0), (200, 12_516.0))) == 50
    assert rounds_offered(ramp_case((50, 12_298.0), (200, 11_975.0))) == 50
    # granian's 200 really is better (14 %): there
    assert rounds_offered(ramp_case((50, 33_523.0), (200, 38_894.0))) == 200
    # a step with errors is no candidate
    failing = ramp_case((50, 12_500.0), (200, 12_400.0))
    failing = dataclasses.replace(
        failing,
        steps=(dataclasses.replace(failing.steps[0], errors={"total": 3}), failing.steps[1]),
    )
    assert rounds_offered(failing) == 200
    # a rate ramp's rounds stay at the highest rate it held
    rate = dataclasses.replace(
        ramp_case((50, 1.0)),
        steps=(dataclasses.replace(step(3000.0), unit="req/s", offered=3000.0),),
        summary=Summary(peak=3000.0, peak_offered=3000.0),
    )
    assert rounds_offered(rate) == 3000.0


def test_a_profile_refuses_one_round() -> None:
    with pytest.raises(UserError, match="rounds must be 0 or at least 2"):
        load_profile("smoke", {"rounds": 1})


def step(achieved: float, p99: float = 5.0, cpu: float = 90.0, flags: tuple[str, ...] = ()) -> Step:
    return Step(
        offered=100,
        unit="concurrency",
        achieved=achieved,
        replies=int(achieved),
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=synthetic_latency_ms(p99),
        server_cpu_pct=cpu,
        flags=flags,
    )


def case(framework: str, ramp_peak: float, rounds: list[float], **step_fields: object) -> Case:
    ramp_case = one_step_case(
        framework, step(ramp_peak), Summary(peak=ramp_peak, peak_offered=100, p99_at_peak_ms=5.0)
    )
    round_cases = [
        (index, Case(**{**ramp_case.__dict__, "steps": (step(value, **step_fields),)}))  # type: ignore[arg-type]
        for index, value in enumerate(rounds)
    ]
    return with_rounds(ramp_case, round_cases)


def test_rounds_give_the_peak_its_mean_and_interval_and_keep_the_ramps_peak() -> None:
    measured = case("aiohttp", 1500.0, [1000.0, 1100.0, 1200.0])
    summary = measured.summary
    assert (summary.rounds, summary.ramp_peak, summary.peak) == (3, 1500.0, 1100.0)
    assert summary.peak_ci is not None and summary.peak_ci[0] < 1100 < summary.peak_ci[1]
    assert summary.p99_at_peak_ci_ms == (5.0, 5.0)
    assert [s.figures.round for s in measured.rounds] == [0, 1, 2]


def test_contended_rounds_are_left_out_while_two_remain() -> None:
    quiet = case("aiohttp", 1000.0, [1000.0, 1010.0, 990.0])
    contended = with_rounds(
        quiet,
        [
            (i, Case(**{**quiet.__dict__, "steps": (s,)}))
            for i, s in enumerate(  # type: ignore[arg-type]
                [step(1000.0), step(1010.0), step(300.0, flags=("contended",))]
            )
        ],
    )
    assert contended.summary.rounds_contended == 1
    assert contended.summary.peak == pytest.approx(1005.0)
    assert "contended" in contended.summary.flags


def test_ratios_to_nginx_are_paired_by_round() -> None:
    nginx = case("nginx", 10000.0, [10000.0, 8000.0, 12000.0])
    aiohttp = case("aiohttp", 2000.0, [2000.0, 1600.0, 2400.0])
    with_ratio = with_baseline_ratios([aiohttp, nginx], {"nginx": "baseline"})[0]
    assert with_ratio.summary.ratio_to_nginx == pytest.approx(0.2)
    assert with_ratio.summary.ratio_to_nginx_ci == (0.2, 0.2)


def test_the_ranking_groups_what_the_rounds_cannot_separate() -> None:
    leader = case("nginx", 10000.0, [10000.0, 10100.0, 9900.0, 10050.0])
    tied_a = case("twisted", 3000.0, [3000.0, 3300.0, 2800.0, 3100.0])
    tied_b = case("node-express", 2950.0, [3100.0, 3000.0, 3000.0, 2900.0])
    last = case("tornado", 1000.0, [1000.0, 1010.0, 990.0, 1005.0])
    groups = rank([last, tied_b, leader, tied_a])
    assert [[c.framework for c in g] for g in groups] == [
        ["nginx"],
        ["twisted", "node-express"],
        ["tornado"],
    ]
    ratio = round_ratio(leader, last)
    assert (
        ratio is not None and ratio.excludes(1.0) and math.isclose(ratio.value, 10.0, rel_tol=0.02)
    )
    said = verdict([last, tied_b, leader, tied_a])
    assert said is not None
    assert said["text"].startswith("nginx > twisted ≈ node-express (nginx/twisted ")
    assert said["sets"][0]["ranking"] == [["nginx"], ["twisted", "node-express"], ["tornado"]]


def test_without_rounds_the_verdict_says_it_has_no_intervals() -> None:
    one = Case(
        framework="gevent", scenario="text", sink="empty", driver="wrk", process_model="single",
        affinity={"mode": "both"}, status="ok", summary=Summary(peak=100.0),
    )  # fmt: skip
    said = verdict([one])
    assert said is not None and said["text"] == "gevent (by peak; no rounds, so no intervals)"
    assert verdict([]) is None


def test_tied_ramp_loads_are_tried_and_the_longer_readings_choose() -> None:
    # node-http's two quick compares: 200 read 6 % above 50 in one ramp, below in the
    # next; within 15 % both loads are tried, in ascending order
    assert trial_loads(ramp_case((50, 58_000.0), (200, 61_600.0))) == [50, 200]
    assert trial_loads(ramp_case((50, 62_000.0), (200, 55_000.0))) == [50, 200]
    # a clear winner (more than 15 % above) is not tried against
    assert trial_loads(ramp_case((50, 30_000.0), (200, 38_894.0))) == []
    # one step: nothing to try
    assert trial_loads(ramp_case((50, 12_000.0))) == []
    # many tied steps: the ramp's choice and the best readings, three at most
    many = ramp_case((10, 9_000.0), (20, 9_900.0), (40, 10_000.0), (80, 9_600.0), (160, 9_950.0))
    assert trial_loads(many) == [20, 40, 160]  # 20: the ramp's choice (10 read < 95 %)
    # the longer readings: the lowest load within 5 % of the best
    assert trial_choice({50: 62_514.0, 200: 55_485.0}) == 50
    assert trial_choice({50: 61_000.0, 200: 62_000.0}) == 50
    assert trial_choice({50: 50_000.0, 200: 62_000.0}) == 200


def test_a_cases_trials_are_said_in_its_summary() -> None:
    case = ramp_case((50, 58_000.0), (200, 61_600.0))
    kept = dataclasses.replace(
        step(62_514.0), offered=50, figures=StepFigures(trials=[[50, 62_514.0], [200, 55_485.0]])
    )
    rounds = [(0, one_step_case("gevent", kept, case.summary))]
    rounds += [
        (i, one_step_case("gevent", dataclasses.replace(step(62_000.0), offered=50), case.summary))
        for i in (1, 2)
    ]
    summary = with_rounds(case, rounds).summary
    assert summary.peak_offered == 50
    assert summary.limit_note == (
        "rounds at concurrency 50: the ramp's readings tied, "
        "the first round read 62,514 req/s at 50, 55,485 req/s at 200"
    )
    assert trial_note([step(1.0)]) is None


def test_holm_adjusts_a_family_step_down_and_welch_reads_logs() -> None:
    # m = 4: the smallest × 4, the next × 3 (kept at least the one before), …; None untouched
    adjusted = holm_adjusted([0.01, None, 0.04, 0.03, 0.5])
    assert adjusted == pytest.approx([0.04, None, 0.09, 0.09, 0.5])  # type: ignore[arg-type]
    assert holm_adjusted([]) == [] and holm_adjusted([0.9, 0.02]) == [0.9, 0.04]
    # Welch on logs: a ratio, whatever the scale; two flat sides equal or not
    assert welch_log_p([10, 11, 12], [20, 22, 24]) == pytest.approx(
        welch_log_p([1, 1.1, 1.2], [2, 2.2, 2.4])
    )
    assert welch_log_p([5.0, 5.0], [5.0, 5.0]) == 1.0 and welch_log_p([5.0, 5.0], [6.0, 6.0]) == 0.0
    assert welch_log_p([1.0], [1.0, 2.0]) is None

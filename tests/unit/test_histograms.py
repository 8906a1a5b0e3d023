"""Latency histograms kept whole: encoded, merged exactly across processes and repeats,
and the knee of a rate ramp read from the steps."""

from __future__ import annotations

import dataclasses
import random

import pytest

from drivers import histograms as hdr
from drivers.base import DriverResult, merge_results, no_latency
from harness.run.analysis import (
    behind_schedule,
    combine_repeats,
    cpu_contended,
    find_knee,
    summarize,
)
from model.ramps import ConstantRateRamp
from model.results import LATENCY_KEYS, Case, Step
from model.step_figures import StepFigures


def histogram_of_ms(values_ms: list[float]) -> str:
    return hdr.encode(hdr.histogram_of(v * 1000.0 for v in values_ms))


def test_two_histograms_merge_into_one_with_the_summed_count_and_percentiles_between() -> None:
    rng = random.Random(15)
    fast = hdr.histogram_of(rng.lognormvariate(6.5, 0.4) for _ in range(20_000))  # ~0.7 ms
    slow = hdr.histogram_of(rng.lognormvariate(8.0, 0.8) for _ in range(5_000))  # ~3 ms
    merged = hdr.decode(hdr.merge_encoded([hdr.encode(fast), hdr.encode(slow)]))
    assert merged.get_total_count() == fast.get_total_count() + slow.get_total_count() == 25_000
    for percentile in (50.0, 90.0, 99.0, 99.9, 99.99):
        low, high = sorted(h.get_value_at_percentile(percentile) for h in (fast, slow))
        assert low <= merged.get_value_at_percentile(percentile) <= high, percentile
    assert merged.get_max_value() == max(fast.get_max_value(), slow.get_max_value())
    assert merged.get_min_value() == min(fast.get_min_value(), slow.get_min_value())


def test_encoding_is_lossless_and_values_outside_the_range_are_clamped() -> None:
    histogram = hdr.histogram_of([0.2, 5, 1234, 10**9])
    again = hdr.decode(hdr.encode(histogram))
    assert again.get_total_count() == 4
    assert again.get_min_value() == hdr.LOWEST_US  # 0.2 µs counts as 1 µs
    assert again.get_max_value() == pytest.approx(hdr.HIGHEST_US, rel=1e-3)  # 1,000 s → 60 s
    assert hdr.latency_ms(again) == hdr.latency_ms(histogram)


def test_an_undecodable_histogram_is_refused() -> None:
    with pytest.raises(ValueError, match="not an encoded HdrHistogram"):
        hdr.decode("not base64 at all")


def test_latency_figures_come_from_the_histogram() -> None:
    figures = hdr.latency_ms(hdr.histogram_of(range(1, 10_001)))  # 1 µs .. 10 ms
    assert set(figures) == set(LATENCY_KEYS)
    assert figures["p50"] == pytest.approx(5.0, rel=1e-2)
    assert figures["p99.9"] == pytest.approx(9.99, rel=1e-2)
    assert figures["max"] == pytest.approx(10.0, rel=1e-3)
    assert hdr.latency_ms(hdr.new_histogram()) == no_latency()


def test_processes_side_by_side_merge_their_histograms_exactly() -> None:
    def result(values_ms: list[float]) -> DriverResult:
        encoded = histogram_of_ms(values_ms)
        return DriverResult(
            replies=len(values_ms),
            duration_s=1.0,
            errors={},
            latency_ms=hdr.latency_ms(hdr.decode(encoded)),
            histograms={"latency": encoded},
        )

    merged = merge_results([result([1.0] * 900), result([100.0] * 100)])
    assert hdr.decode(merged.histograms["latency"]).get_total_count() == 1000
    assert merged.latency_ms["p50"] == pytest.approx(1.0, rel=1e-2)
    assert merged.latency_ms["p99"] == pytest.approx(100.0, rel=1e-2)  # no averaging


def step(
    offered: float,
    p99: float | None,
    *,
    achieved: float | None = None,
    errors: int = 0,
    histograms: dict[str, str] | None = None,
) -> Step:
    return Step(
        offered=offered,
        unit="req/s",
        achieved=offered if achieved is None else achieved,
        replies=int(offered),
        errors={"total": errors},
        error_rate=0.0,
        latency_ms={**dict.fromkeys(LATENCY_KEYS), "p99": p99},
        histograms=histograms or {},
    )


def test_repeats_report_the_latency_of_every_request_of_every_repeat() -> None:
    first = step(1000, 1.0, histograms={"latency": histogram_of_ms([1.0] * 1000)})
    second = step(1000, 50.0, histograms={"latency": histogram_of_ms([1.0] * 960 + [50.0] * 40)})
    cases = [
        Case("aiohttp", "text", "empty", "oha", "single", {"mode": "both"}, "ok", steps=(s,))
        for s in (first, second)
    ]
    [combined] = combine_repeats(cases).steps
    merged = hdr.decode(combined.histograms["latency"])
    assert merged.get_total_count() == 2000
    assert combined.latency_ms["p99"] == pytest.approx(50.0, rel=1e-2)  # 40 of 2,000 at 50 ms: 2 %
    assert combined.latency_ms["p90"] == pytest.approx(1.0, rel=1e-2)


P99_FLOOR_THEN_KNEE = [(500, 0.8), (1000, 0.7), (2000, 0.9), (3000, 1.2), (4000, 6.0), (5000, 40.0)]


def test_the_knee_is_where_p99_leaves_its_floor_for_good() -> None:
    knee = find_knee([step(rate, p99) for rate, p99 in P99_FLOOR_THEN_KNEE])
    assert knee == {
        "offered": 4000,
        "p99_ms": 6.0,
        "last_on_floor": 3000,
        "floor_p99_ms": 0.7,
        "threshold_ms": 2.1,
    }


def test_a_lone_spike_is_not_a_knee_and_a_step_that_did_not_hold_is_off_the_floor() -> None:
    spiky = [step(500, 0.8), step(1000, 9.0), step(2000, 0.9), step(3000, 1.0)]
    assert find_knee(spiky) is None  # back on the floor after the spike
    short = [step(500, 0.8), step(1000, 0.9), step(2000, 1.0, achieved=1500.0)]
    assert find_knee(short)["offered"] == 2000  # type: ignore[index]
    failing = [step(500, 0.8), step(1000, 0.9, errors=3)]
    assert find_knee(failing)["last_on_floor"] == 500  # type: ignore[index]


def test_the_summary_of_a_rate_ramp_carries_its_knee() -> None:
    summary = summarize([step(rate, p99) for rate, p99 in P99_FLOOR_THEN_KNEE])
    assert summary.knee is not None and summary.knee["offered"] == 4000
    assert summary.peak == 5000  # the knee is not the peak: every step here held
    without_p99 = summarize([step(500, None), step(1000, None)])
    assert without_p99.knee is None


def test_constant_rate_ramp_steps_and_its_checks() -> None:
    ramp = ConstantRateRamp(rates=[500, 1000, 2000], duration_s=4)  # type: ignore[arg-type]
    assert [(s.offered, s.unit, s.duration_s) for s in ramp] == [
        (500.0, "req/s", 4),
        (1000.0, "req/s", 4),
        (2000.0, "req/s", 4),
    ]
    assert ConstantRateRamp(rates="500,1000").rates == (500.0, 1000.0)  # type: ignore[arg-type]
    for bad, message in (
        ({"rates": ()}, "at least one"),
        ({"rates": (1000, 500)}, "must rise"),
        ({"rates": (0,)}, "positive"),
        ({"rates": (10,), "connections": 0}, "connections"),
    ):
        with pytest.raises(ValueError, match=message):
            ConstantRateRamp(**bad)  # type: ignore[arg-type]


def test_a_step_validates_its_histograms_and_uncorrected_latency() -> None:
    good = step(100, 1.0)
    with pytest.raises(ValueError, match="unknown histograms"):
        dataclasses.replace(good, histograms={"sparkle": "HISTF"})
    with pytest.raises(ValueError, match="latency_uncorrected_ms lacks"):
        dataclasses.replace(good, latency_uncorrected_ms={"p99": 1.0})


# -- open loop: whose limit a missed schedule is ------------------------------------------
def oha_result(sent_per_s: float, max_in_flight: int) -> DriverResult:
    return DriverResult(
        replies=int(sent_per_s),
        duration_s=1.0,
        errors={},
        latency_ms=no_latency(),
        figures=StepFigures(
            offered_per_s=20_000,
            sent_per_s=sent_per_s,
            connections=100,
            max_in_flight=max_in_flight,
        ),
    )


def test_a_missed_schedule_is_the_drivers_when_it_had_a_free_connection_or_no_cpu() -> None:
    assert not behind_schedule(oha_result(19_700, 100), driver_limited=False)  # within 2 %
    assert behind_schedule(oha_result(15_000, 40), driver_limited=False)  # it did not send
    assert not behind_schedule(oha_result(15_000, 100), driver_limited=False)  # server: full
    assert behind_schedule(oha_result(15_000, 100), driver_limited=True)  # it could not run
    closed_loop = DriverResult(replies=1, duration_s=1.0, errors={}, latency_ms=no_latency())
    assert not behind_schedule(closed_loop, driver_limited=True)


def test_cpu_contention_is_told_apart_for_the_driver() -> None:
    assert cpu_contended({"server_cpu_wait_pct": 25.0, "agent_cpu_wait_pct": 1.0}) == (True, False)
    assert cpu_contended({"server_cpu_wait_pct": 0.0, "agent_cpu_wait_pct": 12.0}) == (True, True)
    assert cpu_contended({"server_cpu_wait_pct": None, "agent_cpu_wait_pct": None}) == (
        False,
        False,
    )

"""A connection ramp's peak: the connections held and the load they were held at, both
read from one step (harness.run.analysis.connection_peak_step).

Steps are built as harness.connections builds them: `errors["total"]` counts from the
ramp's start (the agents' counters never reset), `figures.errors_in_step` the hold only.
"""

from __future__ import annotations

from harness.connections import ConnectionRampResult
from harness.run.analysis import connection_peak_step, connection_step_errors, summarize
from harness.run.connection_case import connection_summary
from model.ramps import ConnectionRamp
from model.results import LATENCY_KEYS, Step, Summary
from model.step_figures import StepFigures


def held_step(
    offered: int,
    open_now: int,
    *,
    errors_so_far: int = 0,
    errors_in_hold: int = 0,
    server_cpu_pct: float = 50.0,
) -> Step:
    """One held target of a connection ramp, its errors counted as the runner counts them."""
    return Step(
        offered=offered,
        unit="conns",
        achieved=float(open_now),
        replies=open_now + errors_so_far,
        errors={"total": errors_so_far, "failed_handshake_timeout": errors_so_far},
        error_rate=0.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
        server_cpu_pct=server_cpu_pct,
        rss_max_bytes=100_000_000 + open_now * 15_000,
        figures=StepFigures(open=open_now, errors_in_step=errors_in_hold),
    )


# The fleet run that printed "peak 99,859 conns at 75000 conns": 141 handshakes timed out
# while the 100,000 step was opened, none while it was held.
FLEET_RUN = [
    held_step(25_000, 25_000, server_cpu_pct=20.0),
    held_step(50_000, 50_000, server_cpu_pct=40.0),
    held_step(75_000, 75_000, server_cpu_pct=60.0),
    held_step(100_000, 99_859, errors_so_far=141, errors_in_hold=0, server_cpu_pct=95.0),
]


def peak_from_one_step(summary: Summary, steps: list[Step]) -> bool:
    return any(s.achieved == summary.peak and s.offered == summary.peak_offered for s in steps)


def test_a_step_that_failed_while_opening_is_not_the_peak() -> None:
    assert connection_step_errors(FLEET_RUN) == [0, 0, 0, 141]
    assert connection_peak_step(FLEET_RUN) is FLEET_RUN[2]
    summary = summarize(FLEET_RUN)
    assert (summary.peak, summary.peak_offered, summary.peak_unit) == (75_000, 75_000, "conns")
    assert summary.server_cpu_at_peak_pct == 60.0  # the peak step's, not another's
    assert summary.errors_total == 141  # counted once, not once per later step


def test_the_case_summary_reads_value_and_load_from_the_same_step() -> None:
    ramp = ConnectionRamp(start=25_000, target=100_000, step=25_000)
    result = ConnectionRampResult(
        steps=list(FLEET_RUN),
        limits={"server_sockets_max": 8 * 19_900, "agent_processes": 8},
    )
    summary = connection_summary(ramp, result, server_workers=8, baseline_rss_bytes=100_000_000)
    assert (summary.peak, summary.peak_offered) == (75_000, 75_000)
    assert peak_from_one_step(summary, FLEET_RUN)


def test_where_no_step_failed_the_top_step_is_the_peak() -> None:
    steps = [held_step(1_000, 1_000), held_step(2_000, 2_000), held_step(3_000, 2_990)]
    summary = summarize(steps)
    assert (summary.peak, summary.peak_offered) == (2_990, 3_000)
    assert summary.errors_total == 0


def test_a_later_step_without_errors_of_its_own_is_the_peak() -> None:
    # 3 failed in the 2,000 step; the 3,000 step added none: the highest error-free step
    steps = [
        held_step(1_000, 1_000),
        held_step(2_000, 1_997, errors_so_far=3, errors_in_hold=3),
        held_step(3_000, 2_997, errors_so_far=3),
    ]
    assert connection_step_errors(steps) == [0, 3, 0]
    summary = summarize(steps)
    assert (summary.peak, summary.peak_offered) == (2_997, 3_000)
    assert summary.errors_total == 3


def test_failures_in_a_hold_make_the_step_fail() -> None:
    steps = [held_step(1_000, 1_000), held_step(2_000, 1_950, errors_so_far=50, errors_in_hold=50)]
    summary = summarize(steps)
    assert (summary.peak, summary.peak_offered) == (1_000, 1_000)


def test_no_peak_when_every_step_failed() -> None:
    steps = [
        held_step(1_000, 990, errors_so_far=10),
        held_step(2_000, 1_980, errors_so_far=30),
    ]
    assert connection_peak_step(steps) is None
    summary = summarize(steps)
    assert summary.peak is None and summary.peak_offered is None
    assert summary.server_cpu_at_peak_pct is None
    assert summary.errors_total == 30


def test_repeats_mixing_runs_never_make_a_step_error_free_by_subtraction() -> None:
    # combine_repeats takes each step from the median run: totals may then go down
    steps = [held_step(1_000, 995, errors_so_far=5), held_step(2_000, 1_997, errors_so_far=3)]
    assert connection_step_errors(steps) == [5, -2]
    assert connection_peak_step(steps) is None

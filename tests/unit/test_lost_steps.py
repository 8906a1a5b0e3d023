"""A step with no figures is retried once; still none, it is lost, and the case says so:
the pure parts of harness.run.http_case and model.results."""

from __future__ import annotations

from harness.run.analysis import summarize
from harness.run.http_case import failed_step, is_aborted, retried_step
from model.ramps import RampStep
from model.results import Case
from model.step_figures import RetriedStep
from tests.unit.test_ramps_and_results import make_step

RAMP_STEP = RampStep(3, offered=30, unit="concurrency", duration_s=2)
STATS = {
    "server_cpu_pct": None,
    "agent_cpu_pct": None,
    "rss_max_bytes": None,
    "tick_ms": {"avg": None, "max": None},
}
PINNED = {"server": "0", "agent": "1"}


def test_a_failed_step_is_aborted_and_a_measured_one_is_not() -> None:
    assert is_aborted(failed_step(RAMP_STEP, "siege stopped: did not stop within 5 s", STATS))
    assert not is_aborted(make_step())
    # a step whose every request failed has figures (its errors): not a hole
    assert not is_aborted(make_step(replies=0, errors={"total": 500, "connect": 500}))


def test_a_retry_that_measured_keeps_its_figures_and_names_the_first_attempt() -> None:
    first = failed_step(RAMP_STEP, "siege stopped: did not stop within 5 s of SIGINT", STATS)
    step = retried_step(make_step(), first=first, label="step003")
    assert step.replies == 90005 and "step_lost" not in step.flags
    assert step.figures.retried == RetriedStep(
        first_error="siege stopped: did not stop within 5 s of SIGINT",
        first_raw="step003-*.txt",
    )


def test_a_retry_with_no_figures_either_is_a_lost_step_and_the_case_reads_incomplete() -> None:
    first = failed_step(RAMP_STEP, "no report", STATS)
    lost = retried_step(failed_step(RAMP_STEP, "no report again", STATS), first=first, label="s")
    assert "step_lost" in lost.flags
    steps = (make_step(offered=10), lost, make_step(offered=50, achieved=9500.0))
    case = Case("gevent", "files", "empty", "siege", "single", PINNED, "ok", steps=steps)
    assert case.lost_steps == 1
    assert case.status_text == "incomplete: 1 step lost"
    # the peak may be read past the hole, never without the flag beside it
    summary = summarize(steps)
    assert summary.peak == 9500.0 and "step_lost" in summary.flags
    whole = Case("gevent", "files", "empty", "siege", "single", PINNED, "ok", steps=steps[::2])
    assert whole.status_text == "ok"
    two = Case("gevent", "files", "empty", "siege", "single", PINNED, "ok", steps=(lost, lost))
    assert two.status_text == "incomplete: 2 steps lost"

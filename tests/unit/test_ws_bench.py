"""`harness bench --ws`'s figures: slopes, CPU per connection, paired ratios, verdicts
(harness.bench_ws's pure part; the e2e test runs the real thing)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.bench_ws import (
    RATIO_LIMIT,
    WS_BENCH_OPEN_RATE_MAX,
    WS_BENCH_OPEN_RATE_MAX_WORKERS,
    WS_BENCH_STEPS,
    WsAppRun,
    cpu_us_per_connection,
    failed_reasons_of,
    slope_kb_per_connection,
    verdict,
    ws_bench_summary,
    ws_ramp,
    ws_workers,
)
from harness.stats import Interval


def run(app: str, kb: float | None, rss_kb: float, cpu_us: float, held: int = 1000) -> WsAppRun:
    return WsAppRun(
        app=app,
        target=1000,
        held=held,
        opened=held,
        failed=0,
        kb_per_connection=kb,
        rss_kb_per_connection=rss_kb,
        cpu_us_per_connection=cpu_us,
        cpu_source="cgroup",
    )


def test_kb_per_connection_is_the_slope_of_memory_over_the_held_steps() -> None:
    base = 30_000_000
    points = [(n, base + n * 20 * 1024) for n in (200, 400, 600, 800, 1000)]
    assert slope_kb_per_connection(points) == 20.0
    assert slope_kb_per_connection([(1000, base)]) is None  # one step: no slope
    assert slope_kb_per_connection([(1000, base), (1000, base + 5)]) is None


def test_cpu_per_connection_takes_the_idle_cpu_off() -> None:
    assert cpu_us_per_connection(1.0, 1.5, 1000) == 500.0
    assert cpu_us_per_connection(1.0, 1.5, 1000, idle_cpu_s=0.1) == 400.0
    assert cpu_us_per_connection(1.0, 1.05, 1000, idle_cpu_s=0.1) == 0.0  # never negative
    assert cpu_us_per_connection(1.0, 2.0, 0) is None


def test_the_verdict_reads_the_interval_against_the_limit() -> None:
    assert verdict(Interval(1.1, 1.05, 1.2)) == ("within", None)
    assert verdict(Interval(1.4, 1.3, 1.5)) == ("above", None)
    word, reason = verdict(Interval(1.2, 1.1, 1.3))
    assert word == "undecided" and reason is not None and "straddles 1.25×" in reason
    word, reason = verdict(None)
    assert word == "undecided" and reason is not None and "fewer than two rounds" in reason
    assert verdict(Interval(1.0, 0.9, RATIO_LIMIT)) == ("within", None)  # at the limit


def test_the_summary_pairs_the_rounds_and_gives_each_figure_a_verdict() -> None:
    ours = [
        run("ours", 20.0, 15.0, 400.0),
        run("ours", 21.0, 15.5, 420.0),
        run("ours", 20.5, 15.2, 410.0),
    ]
    minimal = [
        run("minimal", 18.0, 14.0, 300.0),
        run("minimal", 18.9, 14.4, 310.0),
        run("minimal", 18.4, 14.1, 305.0),
    ]
    result = ws_bench_summary("aiohttp", None, ours, minimal)
    assert result.rounds == 3 and result.connections == 1000
    assert result.memory_source == "cgroup" and result.cpu_source == "cgroup"
    assert result.memory.ours == pytest.approx(20.5) and result.memory.minimal == pytest.approx(
        18.433, abs=1e-3
    )
    assert result.memory.ratio == pytest.approx(1.112, abs=1e-3)
    assert (
        result.memory.ci is not None
        and result.memory.ci[0] < result.memory.ratio < result.memory.ci[1]
    )
    assert result.memory.verdict == "within"
    assert result.cpu.ratio == pytest.approx(1.344, abs=1e-3) and result.cpu.verdict == "above"
    assert result.note is None
    assert result.ours_runs == tuple(ours) and result.minimal_runs == tuple(minimal)


def test_without_a_cgroup_the_memory_figure_is_the_rss_slope() -> None:
    ours = [run("ours", None, 15.0, 400.0), run("ours", None, 15.5, 420.0)]
    minimal = [run("minimal", 18.0, 14.0, 300.0), run("minimal", 18.9, 14.4, 310.0)]
    result = ws_bench_summary("gevent", None, ours, minimal)
    assert result.memory_source == "rss"
    assert result.memory.ours == result.rss.ours and result.memory.minimal == result.rss.minimal


def test_an_app_that_held_fewer_connections_than_asked_makes_every_verdict_undecided() -> None:
    ours = [run("ours", 20.0, 15.0, 400.0), run("ours", 20.0, 15.0, 400.0)]
    minimal = [run("minimal", 20.0, 15.0, 400.0, held=990), run("minimal", 20.0, 15.0, 400.0)]
    result = ws_bench_summary("tornado", None, ours, minimal)
    assert result.note == "minimal held 990 of 1,000"
    assert {f.verdict for f in (result.memory, result.rss, result.cpu)} == {"undecided"}
    assert result.memory.reason == result.note


def test_failures_are_kept_by_reason_and_said_most_first() -> None:
    errors = {"total": 214, "failed_handshake_timeout": 200, "closed_reset": 14, "failed_x": 0}
    reasons = failed_reasons_of(errors)
    assert reasons == {"failed_handshake_timeout": 200, "closed_reset": 14}
    lossy = [
        dataclasses.replace(run("ours", 20.0, 15.0, 400.0), failed=214, failed_reasons=reasons),
        dataclasses.replace(
            run("ours", 20.0, 15.0, 400.0), failed=3, failed_reasons={"closed_reset": 3}
        ),
    ]
    result = ws_bench_summary("twisted", None, lossy, [run("minimal", 20.0, 15.0, 400.0)] * 2)
    assert result.failed == {"ours": 217, "minimal": 0}
    assert result.failed_reasons == {
        "ours": {"failed_handshake_timeout": 200, "closed_reset": 17},
        "minimal": {},
    }
    assert result.note == "ours 217 failed (handshake_timeout 200, closed_reset 17)"
    assert result.memory.verdict == "undecided"


def test_a_ramp_cut_short_by_the_agents_time_limit_is_said_in_the_note() -> None:
    cut = "the agents stopped at their time limit after 178 s: 60,000 of 100,000 opened"
    short = dataclasses.replace(run("ours", 20.0, 15.0, 400.0, held=0), cut_short=cut)
    result = ws_bench_summary(
        "gevent", None, [short, short], [run("minimal", 20.0, 15.0, 400.0)] * 2
    )
    assert result.note == f"ours held 0 of 1,000; ours: {cut}"  # said once, not per round
    assert result.cpu.verdict == "undecided" and result.cpu.reason == result.note


def test_the_summary_needs_paired_runs_and_a_run_valid_counts() -> None:
    with pytest.raises(ValueError, match="need pairs"):
        ws_bench_summary("aiohttp", None, [run("ours", 1.0, 1.0, 1.0)], [])
    with pytest.raises(ValueError, match="app 'both'"):
        run("both", 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="negative"):
        dataclasses.replace(run("ours", 1.0, 1.0, 1.0), failed=-1)


def test_the_ramp_reaches_the_connections_asked_in_equal_steps_within_ten_seconds() -> None:
    ramp = ws_ramp(15_000, 3.0, None)
    targets = [int(step.offered) for step in ramp]
    assert targets == [3000, 6000, 9000, 12000, 15000] and len(targets) == WS_BENCH_STEPS
    assert ramp.open_rate_per_s == 1500.0 and ramp.hold_s == 3.0
    odd = [int(step.offered) for step in ws_ramp(1003, 2.0, 500.0)]
    assert odd[-1] == 1003 and len(odd) == WS_BENCH_STEPS
    assert ws_ramp(1003, 2.0, 500.0).open_rate_per_s == 500.0
    # more in 10 s than one core handshakes: opened at the cap, not at 10,000 a second
    assert ws_ramp(100_000, 3.0, None).open_rate_per_s == WS_BENCH_OPEN_RATE_MAX
    # past one process the opening costs more per connection: a lower cap
    assert ws_ramp(100_000, 3.0, None, workers=6).open_rate_per_s == WS_BENCH_OPEN_RATE_MAX_WORKERS
    assert WS_BENCH_OPEN_RATE_MAX_WORKERS < WS_BENCH_OPEN_RATE_MAX
    assert ws_ramp(100_000, 3.0, 1200.0, workers=6).open_rate_per_s == 1200.0  # as asked


@pytest.mark.parametrize(
    ("connections", "open_files", "workers"),
    [(15_000, 20_000, 1), (19_900, 20_000, 1), (19_901, 20_000, 2), (100_000, 20_000, 6),
     (100_000, 1_024, 120)],
)  # fmt: skip
def test_workers_are_as_many_as_the_connections_need_past_one_processs_open_files(
    connections: int, open_files: int, workers: int
) -> None:
    # 100 descriptors a process keeps for itself (FD_HEADROOM); 10 % room for
    # SO_REUSEPORT's uneven spread
    assert ws_workers(connections, open_files) == workers

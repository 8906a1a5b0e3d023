"""A step's noise (other processes on the server's and the load's CPUs), its bottleneck,
and the peak read from the steps the driver did not limit (harness.run.analysis,
harness.monitor's parsers). Pure: captured /proc text and clock readings, no server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.monitor import (
    CpuSnapshot,
    ProcessClock,
    StepWindow,
    parse_proc_stat,
    step_stats,
    window_cpu_pct,
)
from harness.run.analysis import (
    is_contended,
    other_cpu_pct,
    server_saturated,
    step_bottleneck,
    step_noise,
    summarize,
)
from harness.run.http_case import load_cpu_pct
from model.results import Step
from model.step_figures import figures_from_dict

DATA = Path(__file__).parent.parent / "data"
SERVER, LOAD, BOTH = frozenset({0}), frozenset({1}), frozenset({0, 1})


def test_proc_stat_busy_is_user_nice_system_irq_softirq_per_cpu() -> None:
    busy = parse_proc_stat((DATA / "proc_stat.txt").read_text(), ticks_per_s=100)
    assert sorted(busy) == [0, 1]  # the `cpu` total, intr, ctxt... are not CPUs
    # cpu0 … user nice system idle iowait irq softirq steal: idle, iowait, steal left out
    fields = (DATA / "proc_stat.txt").read_text().splitlines()[1].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    assert busy[0] == pytest.approx((user + nice + system + irq + softirq) / 100)


def snapshot(
    t: float,
    busy: dict[int, float],
    harness_s: float = 0.0,
    reaped_s: float = 0.0,
    **descendants: tuple[float, frozenset[int]],
) -> CpuSnapshot:
    return CpuSnapshot(
        t=t,
        busy_s=busy,
        harness_s=harness_s,
        harness_cpus=LOAD,
        reaped_s=reaped_s,
        descendants={
            int(pid.removeprefix("p")): ProcessClock(s, cpus)
            for pid, (s, cpus) in descendants.items()
        },
    )


def test_other_processes_are_what_the_cpus_spent_beyond_the_known_ones() -> None:
    # a 2 s step: CPU 0 busy 1.9 s, of which the server (pinned there) 1.2 s; CPU 1 busy
    # 1.0 s: the harness 0.04 s, the load generator (reaped at the end) 0.7 s
    before = snapshot(100.0, {0: 50.0, 1: 40.0}, harness_s=3.0, reaped_s=5.0, p10=(7.0, SERVER))
    after = snapshot(102.0, {0: 51.9, 1: 41.0}, harness_s=3.04, reaped_s=5.7, p10=(8.2, SERVER))
    noise = step_noise(before, after, server_cpus=SERVER, load_cpus=LOAD, reaped_cpus=LOAD)
    assert noise["other_cpu_pct"] == {"server": 35.0, "load": 13.0}
    assert noise["harness_cpu_pct"] == 2.0
    assert is_contended(noise)


def test_a_floating_known_process_is_never_counted_as_someone_elses() -> None:
    # FerretDB may run on either CPU: subtracted from both, so both figures are lower bounds
    before = snapshot(0.0, {0: 0.0, 1: 0.0}, p10=(0.0, SERVER), p20=(0.0, BOTH))
    after = snapshot(1.0, {0: 0.95, 1: 0.3}, p10=(0.8, SERVER), p20=(0.2, BOTH))
    noise = step_noise(before, after, server_cpus=SERVER, load_cpus=LOAD, reaped_cpus=LOAD)
    assert noise["other_cpu_pct"] == {"server": 0.0, "load": 10.0}  # 0.95-0.8-0.2 < 0: 0
    assert not is_contended(noise)  # 10 % is not more than 10 %


def test_a_process_that_ended_in_the_step_is_counted_once() -> None:
    # p30 had 2.0 s when the step began and was reaped with 2.5 s: the harness's reaped
    # time grew by 2.5, p30 is gone; its step share is 0.5 s
    before = snapshot(0.0, {0: 0.0, 1: 0.0}, reaped_s=1.0, p30=(2.0, LOAD))
    after = snapshot(1.0, {0: 0.0, 1: 0.6}, reaped_s=3.5)
    noise = step_noise(before, after, server_cpus=SERVER, load_cpus=LOAD, reaped_cpus=LOAD)
    assert noise["other_cpu_pct"] == {"server": 0.0, "load": 10.0}


def test_unpinned_sides_share_every_cpu() -> None:
    busy = {0: 1.0, 1: 1.0}
    known = [(0.9, BOTH), (0.5, LOAD)]
    assert other_cpu_pct(busy, known, BOTH, window_s=1.0) == 60.0
    assert other_cpu_pct(busy, known, LOAD, window_s=1.0) == 0.0
    assert other_cpu_pct(busy, known, BOTH, window_s=0.0) == 0.0


def step(
    offered: float = 100.0,
    achieved: float = 5000.0,
    *,
    unit: str = "concurrency",
    errors: int = 0,
    server_cpu: float | None = 50.0,
    tick_avg: float | None = 1.0,
    flags: tuple[str, ...] = (),
    **extra: object,
) -> Step:
    return Step(
        offered=offered,
        unit=unit,
        achieved=achieved,
        replies=int(achieved),
        errors={"total": errors},
        error_rate=0.0,
        latency_ms={
            "avg": 1.0,
            "p50": 1.0,
            "p90": 2.0,
            "p99": 3.0,
            "p99.9": None,
            "p99.99": None,
            "max": 5.0,
        },
        server_cpu_pct=server_cpu,
        tick_ms={"avg": tick_avg, "max": None},
        flags=flags,
        figures=figures_from_dict(dict(extra)),
    )


def bottleneck(s: Step, driver_busy: bool = False, cores: int = 1, cpus: int = 1) -> str:
    return step_bottleneck(s, server_cores=cores, server_cpu_count=cpus, driver_busy=driver_busy)


def test_a_saturated_server_is_the_bottleneck_though_the_driver_spins() -> None:
    # autobench with httperf: tornado at 95 % CPU, httperf short of the rate it was asked
    saturated = step(2000.0, 1500.0, unit="req/s", server_cpu=95.0)
    assert bottleneck(saturated, driver_busy=True) == "server"
    assert bottleneck(step(server_cpu=50.0), driver_busy=True) == "load generator"
    assert bottleneck(step(flags=("driver_capped",))) == "load generator"


def test_the_server_saturates_by_its_cpu_its_cpus_or_its_event_loop() -> None:
    assert server_saturated(step(server_cpu=90.0), server_cores=1, server_cpu_count=1)
    assert not server_saturated(step(server_cpu=89.9), server_cores=1, server_cpu_count=1)
    # two workers on two CPUs: 90 % of two cores
    assert not server_saturated(step(server_cpu=150.0), server_cores=2, server_cpu_count=2)
    # its CPU full with other processes (contended): the server could get no more
    contended = step(server_cpu=40.0, other_cpu_pct={"server": 55.0, "load": 0.0})
    assert server_saturated(contended, server_cores=1, server_cpu_count=1)
    # its event loop a whole 10 ms tick behind, on average
    assert server_saturated(step(tick_avg=10.0), server_cores=1, server_cpu_count=1)
    assert not server_saturated(step(tick_avg=9.9), server_cores=1, server_cpu_count=1)


def test_each_side_is_named() -> None:
    assert bottleneck(step(1000.0, 990.0, unit="req/s", server_cpu=99.0)) == "none"  # it held
    assert bottleneck(step(server_cpu=99.0, errors=5, flags=("limit_capped",))) == "os limit"
    assert bottleneck(step(errors=3, sink_errors_in_step=3)) == "database"
    assert bottleneck(step(backlog_max=1024)) == "database"
    assert bottleneck(step(backlog_max=1023)) == "none"  # a closed loop both sides kept up with
    assert bottleneck(step(errors=3)) == "unknown"
    assert bottleneck(step(server_cpu=None)) == "unknown"


def test_the_peak_is_read_from_steps_the_driver_did_not_limit() -> None:
    steps = (step(50, 9000.0), step(100, 9900.0, flags=("driver_bound",)), step(200, 9500.0))
    summary = summarize(steps)
    assert summary.peak == 9500.0 and summary.limit_note is None
    every = summarize(
        (step(50, 9000.0, flags=("driver_bound",)), step(100, 9900.0, flags=("driver_bound",)))
    )
    assert every.peak == 9900.0
    assert every.limit_note is not None and "load generator" in every.limit_note


def test_a_step_bottleneck_must_be_a_known_side() -> None:
    with pytest.raises(ValueError, match="bottleneck 'cpu'"):
        Step(1.0, "req/s", 1.0, 1, {"total": 0}, 0.0, step().latency_ms, bottleneck="cpu")


def test_step_stats_takes_the_sinks_errors_gained_in_the_window() -> None:
    now = time.time()
    rows = [
        {"t": now - 1, "server_cpu_pct": 1.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 1,
         "sink_errors": 4, "backlog": 0},
        {"t": now + 1, "server_cpu_pct": 1.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 1,
         "sink_errors": 9, "backlog": 700},
        {"t": now + 2, "server_cpu_pct": 1.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 1,
         "sink_errors": 12, "backlog": 20},
    ]  # fmt: skip
    stats = step_stats(rows, [], StepWindow(0, now, now + 2))
    assert (stats["sink_errors"], stats["backlog_max"]) == (8, 700)
    assert step_stats(rows[:1], [], StepWindow(0, now, now + 2))["sink_errors"] is None


def test_a_steps_server_cpu_is_its_clocks_at_both_ends_not_the_samples_mean() -> None:
    """The first 1 s sample straddles the idle gap before the step: a server saturated
    for its 2 s read 41 % and 99.9 % → 70.5 % as a mean; its clocks read at
    the step's two ends give what it used (a worker started in the step counts whole)."""
    now = time.time()
    rows = [
        {"t": now + 0.4, "server_cpu_pct": 41.0, "agent_cpu_pct": 50.0, "server_rss_bytes": 1},
        {"t": now + 1.4, "server_cpu_pct": 99.9, "agent_cpu_pct": 50.0, "server_rss_bytes": 1},
    ]
    window = StepWindow(
        0,
        now,
        now + 2.0,
        server_cpu_s_before={10: 5.0, 11: 1.0},
        server_cpu_s_after={10: 6.5, 11: 1.2, 12: 0.2},  # 12: a worker started in the step
    )
    assert step_stats(rows, [], window)["server_cpu_pct"] == pytest.approx(95.0)
    # without its clocks (an older caller), the samples' mean stays
    assert step_stats(rows, [], StepWindow(0, now, now + 2.0))["server_cpu_pct"] == 70.5


def test_window_cpu_is_each_processs_gain_over_the_wall_time() -> None:
    assert window_cpu_pct({1: 2.0}, {1: 3.0}, 2.0) == pytest.approx(50.0)
    assert window_cpu_pct({1: 2.0, 2: 9.0}, {1: 2.5}, 1.0) == pytest.approx(50.0)  # 2 ended
    assert window_cpu_pct({}, {}, 0.0) is None


def test_a_steps_load_cpu_is_its_cgroups_time_over_the_window_not_the_samples_mean() -> None:
    """h2load busy for a whole 3 s round: its load cgroup counted 2.97 s (99 %), the 1 s
    samples' mean 73 %, which left the round unflagged where the driver was the bound."""
    now = time.time()
    window = StepWindow(0, now, now + 3.0)
    assert load_cpu_pct(2.97, window, sampled_pct=73.0) == 99.0
    assert load_cpu_pct(None, window, sampled_pct=73.0) == 73.0  # no reading: the samples
    assert load_cpu_pct(1.0, StepWindow(0, now), sampled_pct=None) is None  # not ended


def test_a_step_seen_ending_late_is_read_until_it_really_ended() -> None:
    """A connection ramp's top step is closed when the runner sees an agent closing; the
    close storm stalls the box, so that can come seconds late (node-express's 1,000,000:
    5 s). Read `until` the first agent's closing_t, its hold's 2-12 ms ticks and RSS are
    the step's, not the storm's 4 s."""
    now = time.time()
    rows = [
        {"t": now + 1, "server_cpu_pct": 30.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 7},
        {"t": now + 2, "server_cpu_pct": 30.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 8},
        {"t": now + 9, "server_cpu_pct": 150.0, "agent_cpu_pct": 0.0, "server_rss_bytes": 9},
    ]
    telemetry = [
        {"t": now + 1, "tick_avg_ms": 0.2, "tick_max_ms": 12.0},
        {"t": now + 2, "tick_avg_ms": 0.2, "tick_max_ms": 6.0},
        {"t": now + 8, "tick_avg_ms": 900.0, "tick_max_ms": 4044.0},
    ]
    window = StepWindow(0, now, now + 9)
    late = step_stats(rows, telemetry, window)
    assert late["tick_ms"]["max"] == 4044.0 and late["rss_max_bytes"] == 9
    read = step_stats(rows, telemetry, window, until=now + 3)
    assert read["tick_ms"] == {"avg": 0.2, "max": 12.0}
    assert read["rss_max_bytes"] == 8 and read["server_cpu_pct"] == 30.0

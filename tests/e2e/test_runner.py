"""The runner end to end: real servers, real wrk, pinned CPUs, results on disk."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.compare import build_plan
from harness.run import Runner, SilentReporter, combine_repeats, summarize
from harness.run.analysis import TIE_FRACTION
from harness.run.outputs import ramp_dir
from harness.run_options import RunOptions
from harness.tools import tool_path
from model.results import Case, Step, read_run
from servers import FRAMEWORKS, Framework
from tests.helpers import harness, require_ferretdb, require_framework, require_tools

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
# the smoke profile's steps at 1 s, without warm-up or cool-down, for the runs below that
# check what a run records, not a long step's reading (and, with verify=False, without the
# verify pass: test_smoke_compare_of_two_frameworks_writes_valid_results checks it)
SHORT = {"ramp.duration_s": 1, "warmup_s": 0, "cooldown_s": 0}


def smoke_frameworks() -> str:
    names = [n for n in ("aiohttp", "twisted", "tornado", "gevent") if FRAMEWORKS[n].available()]
    if len(names) < 2:
        pytest.skip("needs two installed frameworks")
    return ",".join(names[:2])


def test_smoke_compare_of_two_frameworks_writes_valid_results(tmp_path: Path) -> None:
    require_tools("wrk")
    frameworks = smoke_frameworks()
    result = harness(
        "compare",
        "--frameworks",
        frameworks,
        "--profile",
        "smoke",
        # smoke's 2 s steps (monitor.csv needs its rows), without the pauses around them
        "--set",
        "warmup_s=0",
        "--set",
        "cooldown_s=0",
        "--out",
        str(tmp_path),
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = list(tmp_path.iterdir())
    # one folder per case, its ramp and rounds inside; FILES.md says what each file is
    folders = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    keys = sorted(c.key for c in read_run(run_dir).cases)
    assert folders == sorted([*keys, "charts"])
    for key in keys:
        passes = sorted(p.name for p in (run_dir / key).iterdir())
        assert passes == ["ramp"]  # no rounds in smoke: tests/e2e/test_ci_outputs.py has them
    index = (run_dir / "FILES.md").read_text()
    assert all(f"| `{key}/` | ok | `ramp/` |" in index for key in keys)
    assert str(run_dir / "run.json") in result.stdout.replace("\n", "")
    run = read_run(run_dir)
    assert run.finished is not None
    assert [c.framework for c in run.cases] == frameworks.split(",")
    for case in run.cases:
        assert case.status == "ok", case.error
        assert case.verify and all(check["ok"] for check in case.verify.values())
        assert [s.offered for s in case.steps] == [10, 20]
        if TWO_CPUS:
            assert case.affinity == {"mode": "both", "server": "0", "agent": "1"}
        for step in case.steps:
            assert step.achieved > 100, step
            assert step.errors["total"] == 0
            assert step.latency_ms["p99"] is not None
            assert step.server_cpu_pct is not None and step.server_cpu_pct > 0
            assert step.rss_max_bytes and step.rss_max_bytes > 1_000_000
            assert step.tick_ms["max"] is not None
            assert step.probe_ms is not None and step.probe_ms > 0
        assert case.summary.peak == max(s.achieved for s in case.steps)
        case_dir = ramp_dir(run_dir, case)
        rows = list(csv.DictReader((case_dir / "monitor.csv").open()))
        assert len(rows) >= 3
        assert {
            "cpu_user_pct",
            "cpu0_pct",
            "server_cpu_pct",
            "agent_cpu_pct",
            "mem_cached_bytes",
            "tick_max_ms",
            "requests",
        } <= set(rows[0])
        assert any(float(r["agent_cpu_pct"] or 0) > 0 for r in rows)
        raw = sorted(p.name for p in (case_dir / "raw").iterdir())
        assert "step000-0.txt" in raw and "step001-0.txt" in raw
        assert "WRK_JSON" in (case_dir / "raw" / "step001-0.txt").read_text()
    assert run.host["nofile_soft"] > 0 and run.versions["tools"]["wrk"]
    steps_rows = list(csv.DictReader((run_dir / "steps.csv").open()))
    assert len(steps_rows) == 4
    assert "framework" in result.stdout and "peak" in result.stdout
    assert f"report: {run_dir / 'report.html'}" in result.stdout.replace("\n", "")
    assert (run_dir / "charts" / "throughput.png").is_file()
    assert frameworks.split(",")[0] in (run_dir / "report.html").read_text()


def test_a_failing_framework_never_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    # The server process knows no 'broken' framework: it exits before listening.
    monkeypatch.setitem(FRAMEWORKS, "broken", Framework("broken", "servers.none", (), ("x",)))
    plan = build_plan(
        RunOptions(
            frameworks="broken,aiohttp",
            profile="smoke",
            settings={**SHORT, "ramp.stop": 10},
            results_dir=tmp_path,
            verify=False,
        )
    )
    run = Runner(plan).run()
    broken, aiohttp = run.cases
    assert broken.status == "failed"
    assert "exited with status 2 before listening" in (broken.error or "")
    assert aiohttp.status == "ok"
    assert read_run(plan.out_dir) == run


def test_repeat_interleaves_and_keeps_the_median(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={**SHORT, "repeat": 2, "ramp.stop": 10},
            results_dir=tmp_path,
            verify=False,
        )
    )
    run = Runner(plan).run()
    [case] = run.cases
    [step] = case.steps
    assert step.figures.repeats == 2
    assert len(step.figures.achieved_runs) == 2
    assert case.summary.repeats == 2
    # one folder for the case, a ramp folder a repeat inside it
    [case_dir] = [p for p in plan.out_dir.iterdir() if p.is_dir()]
    assert sorted(p.name for p in case_dir.glob("ramp-r*")) == ["ramp-r1", "ramp-r2"]


class Order(SilentReporter):
    """The label of every case started, in order."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def case_started(self, *, label: str, steps: int) -> None:
        self.labels.append(label)


def test_rounds_run_interleaved_at_each_peak_and_give_intervals(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk", "nginx")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp,nginx",
            profile="smoke",
            # one ramp step: no tie between loads, so no trial rounds (the next test)
            settings={**SHORT, "rounds": 3, "round_duration_s": 1, "ramp.stop": 10},
            results_dir=tmp_path,
            verify=False,
        )
    )
    order = Order()
    run = Runner(plan, order).run()
    assert order.labels == [
        "aiohttp [both]", "nginx [both]",
        "aiohttp [both] round 1 of 3", "nginx [both] round 1 of 3",
        "nginx [both] round 2 of 3", "aiohttp [both] round 2 of 3",
        "aiohttp [both] round 3 of 3", "nginx [both] round 3 of 3",
    ]  # fmt: skip
    aiohttp, nginx = run.cases
    for case in run.cases:
        assert case.status == "ok", case.error
        assert [s.offered for s in case.rounds] == [case.summary.peak_offered] * 3
        assert [s.figures.round for s in case.rounds] == [0, 1, 2]
        low, high = case.summary.peak_ci or (None, None)
        assert low is not None and high is not None and low <= case.summary.peak <= high
        assert case.summary.ramp_peak == summarize(case.steps).peak  # the ramp's reading
    assert nginx.summary.ratio_to_nginx_ci == (1.0, 1.0)
    assert aiohttp.summary.ratio_to_nginx_ci is not None
    assert run.verdict is not None and "nginx" in run.verdict["text"]
    assert read_run(plan.out_dir) == run
    # each case's rounds inside its own folder
    assert len(list(plan.out_dir.glob("*/round-*-of-3"))) == 6


def test_tied_ramp_loads_are_tried_in_the_first_round_and_the_rounds_go_on_at_one(
    tmp_path: Path,
) -> None:
    """aiohttp's ramp at 10 and 11 connections reads within 15 % (one server, one more
    connection): round 1 is tried at both, the rounds go on at the load those readings
    chose, and the summary says what the trials read. When the machine read the two steps
    further apart (its speed shifts by ±15 % from one second to the next some days: a
    clean-clone CI run on 2026-12-05), there is no trial, and the rounds go on at the
    ramp's own choice: the test checks whichever the readings called for."""
    require_framework("aiohttp")
    require_tools("wrk")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={
                "rounds": 2,
                "round_duration_s": 1,
                "warmup_s": 0,
                "cooldown_s": 0,
                "ramp.start": 10,
                "ramp.stop": 11,
                "ramp.step": 1,
                "ramp.duration_s": 1,
            },
            results_dir=tmp_path,
            verify=False,
        )
    )
    order = Order()
    run = Runner(plan, order).run()
    (case,) = run.cases
    assert case.status == "ok", case.error
    ramp = {step.offered: step.achieved for step in case.steps}
    assert sorted(ramp) == [10, 11] and all(step.errors["total"] == 0 for step in case.steps)
    first, second = case.rounds
    assert read_run(plan.out_dir) == run  # the trials' readings, if any, kept in run.json
    if min(ramp.values()) < TIE_FRACTION * max(ramp.values()):  # not tied: no trial
        assert order.labels == [
            "aiohttp [both]",
            "aiohttp [both] round 1 of 2",
            "aiohttp [both] round 2 of 2",
        ]
        assert first.figures.trials is None
        ramp_choice = min(load for load, v in ramp.items() if v >= 0.95 * max(ramp.values()))
        assert first.offered == second.offered == ramp_choice
        return
    assert order.labels == [
        "aiohttp [both]",
        "aiohttp [both] round 1 of 2, trial at 10",
        "aiohttp [both] round 1 of 2, trial at 11",
        "aiohttp [both] round 2 of 2",
    ]
    trials = dict(first.figures.trials)
    assert sorted(trials) == [10, 11] and all(v > 0 for v in trials.values())
    chosen = min(load for load, v in trials.items() if v >= 0.95 * max(trials.values()))
    assert first.offered == second.offered == case.summary.peak_offered == chosen
    assert "the ramp's readings tied" in (case.summary.limit_note or "")


@pytest.mark.skipif(not TWO_CPUS, reason="the affinity matrix needs two CPUs")
def test_affinity_matrix_runs_four_modes_and_reads_them_back(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={**SHORT, "affinity": "matrix", "ramp.stop": 10},
            server_cpus="0",
            load_cpus="1",
            results_dir=tmp_path,
            verify=False,
        )
    )
    run = Runner(plan).run()
    affinity = {c.affinity["mode"]: c.affinity for c in run.cases}
    assert set(affinity) == {"both", "server", "agent", "none"}
    assert affinity["both"] == {"mode": "both", "server": "0", "agent": "1"}
    assert affinity["server"] == {"mode": "server", "server": "0", "agent": "0-1"}
    assert affinity["agent"] == {"mode": "agent", "server": "0-1", "agent": "1"}
    assert affinity["none"] == {"mode": "none", "server": "0-1", "agent": "0-1"}


# ~25 s: in the slow run; the default run stops a compare by SIGTERM and SIGHUP, and by a
# second Ctrl-C during the stop (test_faults)
@pytest.mark.slow
def test_ctrl_c_stops_everything_within_5_s_and_keeps_finished_cases(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    command = [
        sys.executable,
        "-c",
        "from harness.cli import main; main()",
        "compare",
        "--frameworks",
        "aiohttp,aiohttp",
        "--profile",
        "smoke",
        "--out",
        str(tmp_path),
        "--set",
        "ramp.duration_s=20",
        "--set",
        "ramp.stop=10",
        "--set",
        "warmup_s=0",
    ]
    harness_process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    parent = psutil.Process(harness_process.pid)
    children: set[psutil.Process] = set()
    deadline = time.monotonic() + 60

    def command_lines() -> list[str]:
        lines = []
        for child in children:
            with contextlib.suppress(psutil.Error):  # gone, or a zombie
                lines.append(" ".join(child.cmdline()))
        return lines

    def cases_written() -> int:  # run.json is written from the start, then after each case
        with contextlib.suppress(OSError, ValueError, StopIteration):
            return len(json.loads(next(tmp_path.glob("*/run.json")).read_text())["cases"])
        return 0

    while time.monotonic() < deadline:  # until the second case's wrk runs
        children.update(parent.children(recursive=True))
        if any("wrk" in line for line in command_lines()) and cases_written():
            break
        time.sleep(0.2)
    else:
        harness_process.kill()
        pytest.fail("the compare never reached its second case")
    children.update(parent.children(recursive=True))
    interrupted = time.monotonic()
    harness_process.send_signal(signal.SIGINT)
    harness_process.wait(10)
    assert time.monotonic() - interrupted < 5.0
    assert harness_process.returncode == 130
    time.sleep(0.2)
    alive = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.cmdline())
    assert not alive, alive
    [run_json] = list(tmp_path.glob("*/run.json"))
    data = json.loads(run_json.read_text())
    assert (data["status"], data["status_reason"]) == ("interrupted", "stopped by Ctrl-C (SIGINT)")
    assert [c["status"] for c in data["cases"]] == ["ok"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "nope"], "unknown profile nope: choose from"),
        (["--scenario", "nope"], "unknown scenario nope: choose from text"),
        (["--driver", "nope"], "unknown driver nope: choose from wrk"),
        (["--driver", "httperf"], "driver httperf does not run concurrency ramps"),
        (["--profile", "autobench-vps", "--driver", "wrk"], "use --driver httperf"),
        (["--server-cpus", "9999"], "CPU 9999 is not available"),
        (["--out", "/proc/harness-results"], "is not writable"),
        (["--results", "/proc/harness-results"], "choose another with --results"),
        (["--set", "ramp.step=-5"], "must be positive"),
        (["--process-model", "cluster"], "is not single, workers:N, lb:N or lb:N/workers:M"),
    ],
)
def test_compare_user_mistakes_get_one_line(args: list[str], message: str) -> None:
    result = harness("compare", "--frameworks", "aiohttp", *args)
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_missing_tool_is_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "taskset").symlink_to(tool_path("taskset") or "/usr/bin/taskset")
    env = {**os.environ, "PATH": str(tmp_path)}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "compare",
            "--frameworks",
            "aiohttp",
            "--profile",
            "smoke",
            "--driver",
            "siege",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    if tool_path("siege") and Path(tool_path("siege") or "").parent.name == "sbin":
        pytest.skip("siege is in sbin, always searched")
    assert result.returncode == 1
    assert "siege not found: run `harness doctor --install`" in result.stderr


# -- pure pieces ---------------------------------------------------------------------------
def step(offered: float, achieved: float, errors: int = 0, unit: str = "req/s") -> Step:
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
            "p99": offered / 100,
            "p99.9": None,
            "p99.99": None,
            "max": 5.0,
        },
    )


def test_rate_peak_is_the_autobench_reading() -> None:
    steps = (step(500, 500), step(1000, 990), step(1500, 1300), step(2000, 2000, errors=3))
    summary = summarize(steps)
    assert summary.peak == 1000  # 1500 achieved < 95 %; 2000 had errors
    assert summary.p99_at_peak_ms == 10
    assert summary.errors_total == 3


def test_concurrency_peak_is_the_best_clean_throughput() -> None:
    steps = (
        step(50, 9000, unit="concurrency"),
        step(100, 9500, unit="concurrency"),
        step(200, 9900, errors=1, unit="concurrency"),
    )
    assert summarize(steps).peak == 9500
    assert summarize(()).peak is None


def test_repeats_combine_to_the_median_and_flag_spread() -> None:
    def case(achieved: float) -> Case:
        return Case(
            "a",
            "text",
            "empty",
            "wrk",
            "single",
            {"mode": "both"},
            "ok",
            steps=(step(100, achieved, unit="concurrency"),),
        )

    combined = combine_repeats([case(1000), case(1300), case(1050)])
    [median] = combined.steps
    assert median.achieved == 1050
    assert "noisy" in median.flags  # (1300 - 1000) / 1050 > 10 %
    steady = combine_repeats([case(1000), case(1020)]).steps[0]
    assert "noisy" not in steady.flags


@pytest.mark.parametrize("sink", ["file", "mongo"])
def test_log_scenario_reconciles_what_the_sink_holds(tmp_path: Path, sink: str) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    if sink == "mongo":
        require_ferretdb()
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={**SHORT, "scenario": "log", "sink": sink, "ramp.stop": 10},
            results_dir=tmp_path,
            verify=False,
        )
    )
    [case] = Runner(plan).run().cases
    assert case.status == "ok", case.error
    assert case.reconcile is not None
    assert case.reconcile["sent"] == sum(s.replies for s in case.steps) > 100
    assert case.reconcile["lost"] == 0
    # wrk stops with requests in flight: stored, never acknowledged; at most its concurrency
    assert case.reconcile["stored"] - case.reconcile["sent"] <= 10
    assert case.summary.sink_store["sink"] == sink
    if sink == "mongo":
        assert case.summary.sink_store["server"] == "FerretDB"


def test_a_framework_without_the_sink_is_skipped_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_framework("aiohttp")
    monkeypatch.setitem(
        FRAMEWORKS,
        "aiohttp",
        Framework("aiohttp", "servers.frameworks.aiohttp", ("aiohttp",), ("asyncio",), ("empty",)),
    )
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={"scenario": "log", "sink": "file"},
            results_dir=tmp_path,
        )
    )
    [case] = Runner(plan).run().cases
    assert case.status == "skipped"
    assert case.error == "not supported: aiohttp has no file sink"


def test_a_server_that_dies_during_a_connection_ramp_fails_the_case(tmp_path: Path) -> None:
    import threading

    require_framework("aiohttp")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={"scenario": "ws-idle", "connection_ramp.hold_s": 20},
            results_dir=tmp_path,
            verify=False,  # nothing here reads it
        )
    )

    def kill_the_server() -> None:
        # Killed once the ramp holds its first step's connections (50 in smoke): verify's few
        # connections come before, so a loaded machine cannot make this a verify failure.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for child in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "servers" not in child.cmdline():
                        continue
                    held = child.net_connections("tcp")
                    if sum(c.status == psutil.CONN_ESTABLISHED for c in held) >= 40:
                        child.kill()
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_server, daemon=True)
    killer.start()
    started = time.monotonic()
    [case] = Runner(plan).run().cases
    assert case.status == "failed"
    assert "server killed by SIGKILL at" in (case.error or "")
    assert time.monotonic() - started < 20  # not the whole 2 × 20 s hold

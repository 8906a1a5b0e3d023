"""How a run ends, without processes: its status in run.json, stop signals as Ctrl-C, files
written whole, run ids that never collide, and the server stopped whatever the monitor does.

The same, end to end with real processes, is in tests/e2e/test_faults.py.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from charts.tables import run_status_line
from harness import lifecycle
from harness.compare import build_plan
from harness.lifecycle import Interrupted, signals_as_interrupts
from harness.monitor import Monitor
from harness.profile import load_profile
from harness.run import case_server
from harness.run import loop as loop_module
from harness.run.case import SERVED_PHASES
from harness.run.case_state import CaseState
from harness.run.context import CaseContext, RunContext
from harness.run.outputs import write_steps_csv
from harness.run.pipeline import run_pipeline
from harness.run.plan import Plan, SilentReporter
from harness.run_options import RunOptions
from harness.topology import ProcessModel
from model.results import Case, Run, read_run
from model.scenarios import get_scenario


# -- stop signals ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"]
)
def test_a_stop_signal_is_a_ctrl_c_and_a_second_one_does_not_cut_the_cleanup(
    signum: int,
) -> None:
    cleaned = False
    with signals_as_interrupts() as stopping:
        with pytest.raises(Interrupted) as raised:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises at once
        assert isinstance(raised.value, KeyboardInterrupt)
        assert raised.value.exit_status == 128 + signum
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C during the cleanup
        cleaned = True
    assert cleaned and stopping.signum == signum and stopping.count == 2
    assert signal.getsignal(signal.SIGTERM) is not None  # the previous handlers are back
    assert lifecycle.interrupt_reason(raised.value) == (
        "stopped by Ctrl-C (SIGINT)"
        if signum == signal.SIGINT
        else f"stopped by {signal.Signals(signum).name}"
    )


# -- the run's status --------------------------------------------------------------------
def fake_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: BaseException) -> Any:
    """A Runner over two frameworks whose second case raises `fault` (no process runs)."""
    monkeypatch.setattr(loop_module, "host_facts", lambda: {"python": "3"})
    monkeypatch.setattr(
        loop_module, "tool_status", lambda tool: SimpleNamespace(path="/bin/true", version="1")
    )
    done = Case("aiohttp", "text", "empty", "wrk", "single", {"mode": "both"}, "ok")

    def run_case(run: Any, framework: str, *args: Any) -> Case:
        if framework == "tornado":
            raise fault
        return done

    monkeypatch.setattr(loop_module, "run_case", run_case)
    profile = load_profile("smoke")
    plan = Plan(profile, ("aiohttp", "tornado"), "0", "1", tmp_path / "run", "run-1")
    return loop_module.Runner(plan)


@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        (Interrupted(signal.SIGTERM), "interrupted", "stopped by SIGTERM"),
        (Interrupted(signal.SIGHUP), "interrupted", "stopped by SIGHUP"),
        (KeyboardInterrupt(), "interrupted", "stopped by Ctrl-C (SIGINT)"),
        (RuntimeError("disk on fire"), "failed", "RuntimeError: disk on fire"),
        (MemoryError(), "failed", "MemoryError"),
    ],
)
def test_every_run_ends_with_a_status_and_its_reason(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: BaseException,
    status: str,
    reason: str,
) -> None:
    runner = fake_runner(tmp_path, monkeypatch, fault)
    with pytest.raises(type(fault)):
        runner.run()
    run = read_run(tmp_path / "run")
    assert (run.status, run.status_reason) == (status, reason)
    assert run.finished is not None
    assert [c.framework for c in run.cases] == ["aiohttp"]  # the finished case is kept
    assert "interrupted" not in run.config
    assert run_status_line(run) == f"{status}: {reason}"


def test_a_run_under_way_says_running_and_a_finished_one_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = fake_runner(tmp_path, monkeypatch, RuntimeError("x"))
    seen: list[str] = []
    original = runner.write

    def write(*args: Any, **kwargs: Any) -> Run:
        written = original(*args, **kwargs)
        seen.append(json.loads((tmp_path / "run" / "run.json").read_text())["status"])
        return written

    runner.write = write
    runner.plan = Plan(runner.plan.profile, ("aiohttp",), "0", "1", tmp_path / "run", "run-1")
    run = runner.run()
    assert seen == ["running", "running", "complete"]
    assert (run.status, run.status_reason) == ("complete", None)


def test_a_status_that_is_not_known_or_without_a_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="run status 'done'"):
        Run("r", "t", None, {}, {}, {}, status="done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failed run needs a status_reason"):
        Run("r", "t", "t", {}, {}, {}, status="failed")


# -- files written whole -----------------------------------------------------------------
class Unprintable:
    def __str__(self) -> str:
        raise OSError(28, "No space left on device")


def test_steps_csv_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "steps.csv"
    path.write_text("the previous steps.csv\n")

    class BrokenRun:
        @property
        def cases(self) -> Any:
            raise OSError(28, "No space left on device")  # after the header was written

    with pytest.raises(OSError):
        write_steps_csv(BrokenRun(), path)  # type: ignore[arg-type]
    assert path.read_text() == "the previous steps.csv\n"
    assert os.listdir(tmp_path) == ["steps.csv"]  # no partial file left


def test_monitor_csv_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "case" / "monitor.csv"
    monitor = Monitor(dict)
    monitor.rows = [{"t": float(t), "server_cpu_pct": 5.0} for t in range(3)]
    monitor.write_csv(path)
    before = path.read_text()
    monitor.rows = [{"t": 1.0, "server_cpu_pct": 5.0}, {"t": 2.0, "server_cpu_pct": Unprintable()}]
    with pytest.raises(OSError):
        monitor.write_csv(path)
    assert path.read_text() == before
    assert len(list(csv.DictReader(before.splitlines()))) == 3
    assert os.listdir(path.parent) == ["monitor.csv"]


# -- run ids -----------------------------------------------------------------------------
class FrozenClock(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> FrozenClock:  # type: ignore[override]
        return cls(2026, 11, 30, 17, 8, 4, 123456, tzinfo=tz)


def test_two_runs_started_in_the_same_millisecond_get_two_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.run.plan as plan_module

    monkeypatch.setattr(plan_module, "datetime", FrozenClock)
    plans = [
        build_plan(
            RunOptions(
                frameworks="aiohttp",
                profile="smoke",
                results_dir=tmp_path,
            )
        )
        for _ in range(3)
    ]
    assert [p.run_id for p in plans] == [
        "20261130-170804.123-smoke",
        "20261130-170804.123.2-smoke",
        "20261130-170804.123.3-smoke",
    ]
    assert len({p.out_dir for p in plans}) == 3
    assert all(p.out_dir.is_dir() and p.out_dir.name == p.run_id for p in plans)


# -- the server is stopped whatever happens once it runs ----------------------------------
class FakeTopology:
    pid = 1
    pids = (1,)
    balancer = None
    instance_url = url = "http://127.0.0.1:1"

    def __init__(self) -> None:
        self.stopped = False

    def latest_telemetry(self) -> dict[int, dict[str, Any]]:
        return {}

    def stop(self, timeout_s: float | None = None) -> int:
        self.stopped = True
        return 0


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), RuntimeError("monitor broke")])
def test_the_server_is_stopped_when_the_monitor_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: BaseException
) -> None:
    server = FakeTopology()
    monkeypatch.setattr(case_server, "start_topology", lambda *a, **k: server)

    def no_monitor(*args: Any, **kwargs: Any) -> Monitor:
        raise fault

    monkeypatch.setattr(case_server, "Monitor", no_monitor)
    profile = load_profile("smoke")
    plan = Plan(profile, ("aiohttp",), "0", "1", tmp_path, "run-1", verify=False)
    ctx = CaseContext(
        run=RunContext(plan, get_scenario(profile.scenario), SilentReporter()),
        framework="aiohttp",
        mode="both",
        process_model=ProcessModel("single"),
        server_cpus="0",
        load_cpus="1",
        load_cpu_count=1,
        case_dir=tmp_path / "case",
        store=SimpleNamespace(server_args=list),  # type: ignore[arg-type]
    )
    state = CaseState(ctx.run, "aiohttp", "both", ctx.process_model, "h1", ctx=ctx)
    with pytest.raises(type(fault)):
        run_pipeline(state, SERVED_PHASES)
    assert server.stopped

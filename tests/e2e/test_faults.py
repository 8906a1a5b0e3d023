"""Faults injected into real runs, each bounded in time and judged by the process table, not
by what the harness says: a server killed mid-step, one of its workers killed, a load
generator killed, the database killed and brought back, the harness stopped by
SIGTERM/SIGHUP during compare and verify, the harness killed outright, a second Ctrl-C
during a stop.

Every harness started here gets its own TMPDIR (under the test's tmp_path): each process it
starts inherits it, so `leftovers()` finds every descendant, reparented or not, by its
environment; and every temporary directory the harness makes lands there, so "temp dirs
gone" is "that directory is empty".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.compare import build_plan
from harness.run import Runner, SilentReporter
from harness.run.plan import Plan
from harness.run_options import RunOptions
from harness.server_process import ServerProcess, start_server
from harness.services.ferretdb import FerretDB, ferretdb_binary
from harness.tools import tool_path
from model.results import Case, Step, read_run
from servers import FRAMEWORKS, contract
from tests.helpers import one_per_runtime, require_ferretdb, require_framework, require_tools

HARNESS = [sys.executable, "-c", "from harness.cli import main; main()"]
# one 20 s step: a fault that is not noticed at once shows as a case that takes the full step
LONG_STEP = {"ramp.duration_s": 20, "ramp.stop": 10, "warmup_s": 0, "cooldown_s": 0}
# ...given to a `harness compare` whose load is interrupted: without the verify pass, which
# is not what these tests stop (test_sigterm_during_verify stops a verify)
LONG_STEP_ARGS = [
    *(arg for key, value in LONG_STEP.items() for arg in ("--set", f"{key}={value}")),
    "--no-verify",
]
# nginx is left out: its master replaces a dead worker, nginx's own rule
SUPERVISED_SERVERS = [name for name, f in FRAMEWORKS.items() if f.kind != "nginx"]


# -- finding processes by the test's own marker --------------------------------------------
def marked(process: psutil.Process, marker: str) -> bool:
    with contextlib.suppress(psutil.Error):
        if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.environ().get("TMPDIR") == marker or marker in " ".join(process.cmdline())
    return False


def leftovers(marker: str) -> list[str]:
    """Every live process carrying `marker` in its environment or command line."""
    found = []
    for process in psutil.process_iter():
        if marked(process, marker):
            with contextlib.suppress(psutil.Error):
                found.append(f"{process.pid} {' '.join(process.cmdline())}")
    return found


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


def find_command(marker: str, *words: str) -> psutil.Process | None:
    """A live marked process whose command line holds every one of `words`."""
    for process in psutil.process_iter():
        if marked(process, marker):
            with contextlib.suppress(psutil.Error):
                line = " ".join(process.cmdline())
                if all(word in line for word in words):
                    return process
    return None


def find_wrk(marker: str) -> psutil.Process | None:
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.name() == "wrk" and marked(process, marker):
                return process
    return None


def alive(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


@pytest.fixture
def private_tmp(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A TMPDIR for one harness, and the environment that gives it to the harness."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    yield tmpdir, {**os.environ, "TMPDIR": str(tmpdir)}
    for process in psutil.process_iter():  # never leave a failed test's processes behind
        if marked(process, str(tmpdir)):
            with contextlib.suppress(psutil.Error):
                process.kill()


@pytest.fixture
def reachable_private_tmp() -> Iterator[tuple[Path, dict[str, str]]]:
    """`private_tmp` under /tmp, open to the postgres user (pytest's tmp_path is root's
    alone): PostgreSQL, run as postgres, keeps its cluster there."""
    tmpdir = Path(tempfile.mkdtemp(prefix="harness-test-", dir="/tmp"))
    tmpdir.chmod(0o755)
    yield tmpdir, {**os.environ, "TMPDIR": str(tmpdir)}
    for process in psutil.process_iter():
        if marked(process, str(tmpdir)):
            with contextlib.suppress(psutil.Error):
                process.kill()
    shutil.rmtree(tmpdir, ignore_errors=True)


def start_harness(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*HARNESS, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


# -- the harness stopped by a signal ---------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_during_compare_stops_everything_and_marks_the_run_interrupted(
    private_tmp: tuple[Path, dict[str, str]], tmp_path: Path, signum: int
) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    tmpdir, env = private_tmp
    out = tmp_path / "results"
    harness = start_harness(
        env, "compare", "--frameworks", "aiohttp", "--profile", "smoke", "--sink", "file",
        "--out", str(out), *LONG_STEP_ARGS,
    )  # fmt: skip
    try:
        # the load's wrk and the server it loads (a `wrk` seen alone may be the harness
        # reading its version before any server started)
        wait_until(
            lambda: (
                find_wrk(str(tmpdir))
                and find_command(str(tmpdir), "-m servers aiohttp", "--sink-path")
            ),
            60,
            "wrk to run against the server with its file sink",
        )
        harness.send_signal(signum)
        started = time.monotonic()
        _, stderr = harness.communicate(timeout=15)
        stopped_s = time.monotonic() - started
    finally:
        harness.kill()
    assert harness.returncode == 128 + signum, stderr
    assert stopped_s < contract.SHUTDOWN_GRACE_S
    assert leftovers(str(tmpdir)) == []
    assert os.listdir(tmpdir) == []  # the sink's temporary directory is gone
    assert "killed processes left running" not in stderr  # each cleanup path did its work
    [run_dir] = list(out.iterdir())
    run = read_run(run_dir)
    name = signal.Signals(signum).name
    assert (run.status, run.status_reason) == ("interrupted", f"stopped by {name}")
    assert f"harness: interrupted (stopped by {name})" in stderr


def test_sigterm_during_verify_leaves_no_server_no_service_and_no_temp_dir(
    private_tmp: tuple[Path, dict[str, str]],
) -> None:
    """The issue's case: SIGTERM to `harness verify` while twisted listened with its sink."""
    require_framework("twisted")
    tmpdir, env = private_tmp
    # with FerretDB and memcached too when they are here: services must stop as well
    services = ferretdb_binary().is_file() and tool_path("memcached") is not None
    backends = ["--backends"] if services else ["--no-backends"]
    harness = start_harness(env, "verify", "--frameworks", "twisted", "--sinks", "file", *backends)
    try:
        wait_until(
            lambda: find_command(str(tmpdir), "-m servers twisted", "--sink-path"),
            60,
            "the twisted server to listen",
        )
        harness.send_signal(signal.SIGTERM)
        started = time.monotonic()
        _, stderr = harness.communicate(timeout=15)
        stopped_s = time.monotonic() - started
    finally:
        harness.kill()
    assert harness.returncode == 128 + signal.SIGTERM, stderr
    assert stopped_s < contract.SHUTDOWN_GRACE_S + 3
    assert leftovers(str(tmpdir)) == []
    assert os.listdir(tmpdir) == []
    assert "killed processes left running" not in stderr


def start_mongo_sink_compare(env: dict[str, str], tmp_path: Path) -> subprocess.Popen[str]:
    """`harness compare` of aiohttp on /log into the mongo sink, its database FerretDB on
    a PostgreSQL cluster of the run's own, with one long step to interrupt."""
    require_framework("aiohttp")
    require_tools("wrk", "postgres")
    require_ferretdb()
    return start_harness(
        env, "compare", "--frameworks", "aiohttp", "--profile", "smoke", "--scenario", "log",
        "--sink", "mongo", "--mongo-backend", "postgresql", "--out", str(tmp_path / "results"),
        *LONG_STEP_ARGS,
    )  # fmt: skip


def test_sigterm_during_a_mongo_sink_compare_stops_ferretdb_and_postgresql(
    reachable_private_tmp: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """The run's database (FerretDB on a PostgreSQL cluster of its own) stops with the
    run, and its cluster directory goes with it."""
    tmpdir, env = reachable_private_tmp
    harness = start_mongo_sink_compare(env, tmp_path)
    try:
        wait_until(lambda: find_wrk(str(tmpdir)), 90, "wrk to run")
        assert find_command(str(tmpdir), "--handler=postgresql")
        assert find_command(str(tmpdir), "postgres -D")
        harness.send_signal(signal.SIGTERM)
        _, stderr = harness.communicate(timeout=30)
    finally:
        harness.kill()
    assert harness.returncode == 128 + signal.SIGTERM, stderr
    assert leftovers(str(tmpdir)) == []
    assert os.listdir(tmpdir) == []  # the cluster's and FerretDB's directories are gone
    assert "killed processes left running" not in stderr


def test_ferretdb_and_postgresql_die_with_a_harness_killed_outright(
    reachable_private_tmp: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """SIGKILL: PostgreSQL, run as another user, still gets its parent-death signal (set
    after the change of user, which clears it) and shuts down with its backends."""
    tmpdir, env = reachable_private_tmp
    harness = start_mongo_sink_compare(env, tmp_path)
    try:
        wait_until(lambda: find_wrk(str(tmpdir)), 90, "wrk to run")
        postmaster = find_command(str(tmpdir), "postgres -D")
        assert postmaster is not None
        backends = postmaster.children()
        assert backends  # checkpointer, walwriter, FerretDB's connections...
        harness.kill()
        harness.wait(5)
        with contextlib.suppress(pytest.fail.Exception):  # the asserts below say what lived
            wait_until(
                lambda: not leftovers(str(tmpdir)) and not any(alive(p) for p in backends),
                # PostgreSQL's immediate shutdown SIGKILLs a backend still there after 5 s
                contract.SHUTDOWN_GRACE_S + 10,
                "the database to die",
            )
    finally:
        harness.kill()
    assert leftovers(str(tmpdir)) == []
    assert [p.pid for p in backends if alive(p)] == []


@pytest.mark.parametrize("process_model", ["single", "workers:2", "lb:2"])
def test_children_die_with_a_harness_killed_outright(
    private_tmp: tuple[Path, dict[str, str]], tmp_path: Path, process_model: str
) -> None:
    """SIGKILL: no handler runs; the parent-death signal is all that stops the children."""
    require_framework("aiohttp")
    require_tools("wrk", *(["nginx"] if process_model.startswith("lb") else []))
    tmpdir, env = private_tmp
    harness = start_harness(
        env, "compare", "--frameworks", "aiohttp", "--profile", "smoke",
        "--process-model", process_model, "--out", str(tmp_path / "results"), *LONG_STEP_ARGS,
    )  # fmt: skip
    try:
        wait_until(lambda: find_wrk(str(tmpdir)), 60, "wrk to run")
        expected = 2 if process_model == "single" else 4  # server(s), wrk, ...
        # read until all are there: on a busy machine a worker may start after wrk did
        wait_until(
            lambda: len(psutil.Process(harness.pid).children(recursive=True)) >= expected,
            30,
            f"{expected} processes under the harness",
        )
        tree = psutil.Process(harness.pid).children(recursive=True)
        harness.kill()
        harness.wait(5)
        wait_until(
            lambda: not leftovers(str(tmpdir)) and not any(alive(p) for p in tree),
            contract.SHUTDOWN_GRACE_S + 2,
            "the children to die",
        )
    finally:
        harness.kill()
    [run_dir] = list((tmp_path / "results").iterdir())
    assert read_run(run_dir).status == "running"  # killed before it could say otherwise


# -- faults inside a run: the case or step fails with the reason, the run goes on ------------
class KillDuringFirstStep(SilentReporter):
    """Kills a process of the first case 1 s into its first step; times the cases."""

    def __init__(self, pick: Callable[[], psutil.Process | None], attempts: int = 1) -> None:
        self.pick = pick
        self.attempts = attempts  # kill in this many starts of the first step (its retry too)
        self.cases_started: list[float] = []
        self.cases_finished: list[float] = []
        self.killed: list[tuple[int, float]] = []
        self._timers = 0

    def case_started(self, *, label: str, steps: int) -> None:
        self.cases_started.append(time.monotonic())

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        if len(self.cases_started) == 1 and index == 0 and self._timers < self.attempts:
            self._timers += 1
            threading.Timer(1.0, self._kill).start()

    def _kill(self) -> None:
        victim = self.pick()
        assert victim is not None, "nothing to kill"
        victim.kill()
        self.killed.append((victim.pid, time.monotonic()))

    def case_finished(self, *, case: Case) -> None:
        self.cases_finished.append(time.monotonic())


def the_server() -> psutil.Process | None:
    """The aiohttp server this test started (the supervisor when it has workers)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "-m servers aiohttp" in " ".join(child.cmdline()) and child.name() != "taskset":
                found.append(child)
    pids = {p.pid for p in found}
    return next((p for p in found if p.ppid() not in pids), None)


def a_worker() -> psutil.Process | None:
    """Worker 1 of the aiohttp server (a child of its supervisor)."""
    supervisor = the_server()
    workers = sorted(supervisor.children(), key=lambda p: p.pid) if supervisor else []
    return workers[-1] if len(workers) == 2 else None


def the_balancer() -> psutil.Process | None:
    """The nginx master balancing the aiohttp instances of `lb:2`."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() == "nginx" and "master" in " ".join(child.cmdline()):
                return child
    return None


def the_wrk() -> psutil.Process | None:
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() == "wrk":
                return child
    return None


@pytest.mark.parametrize(
    ("process_model", "pick", "reason", "who"),
    [
        ("single", the_server, "server killed by SIGKILL", "server"),
        ("workers:2", a_worker, "was killed by SIGKILL: stopping the other workers", "server"),
        ("lb:2", the_balancer, "load balancer killed by SIGKILL", "load balancer"),
    ],
    ids=["server", "one-worker", "balancer"],
)
def test_a_killed_server_fails_its_case_at_once_and_the_run_goes_on(
    tmp_path: Path,
    process_model: str,
    pick: Callable[[], psutil.Process | None],
    reason: str,
    who: str,
) -> None:
    require_framework("aiohttp")
    require_framework("tornado")
    require_tools("wrk", "nginx")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp,tornado",
            profile="smoke",
            settings={**LONG_STEP, "ramp.duration_s": 10, "process_model": process_model},
            results_dir=tmp_path,
            verify=False,  # the fault in the load is the test, not the server's answers
        )
    )
    reporter = KillDuringFirstStep(pick)
    run = Runner(plan, reporter).run()
    first, second = run.cases
    assert first.status == "failed", first
    assert reason in (first.error or ""), first.error
    assert "during step 0" in (first.error or "")
    [step] = first.steps
    # the step stopped for the server's (or the balancer's) sake
    assert who in step.figures.driver_error
    _, killed_at = reporter.killed[0]
    # noticed at once, not when the 10 s step ends (a worker's peer stops within the grace)
    assert reporter.cases_finished[0] - killed_at < contract.SHUTDOWN_GRACE_S + 2
    assert second.status == "ok", second.error
    assert run.status == "complete"


# wrk is killed 1 s into the step, which then runs again in full: 5 s leave room for the
# kill, and a hang (unbounded) still shows against the bound the test sets
WRK_KILL_STEP = {**LONG_STEP, "ramp.duration_s": 5}


def aiohttp_long_step_plan(tmp_path: Path) -> Plan:
    """aiohttp, one 5 s wrk step, unpinned: room to kill a process during it."""
    require_framework("aiohttp")
    require_tools("wrk")
    return build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings=WRK_KILL_STEP,
            results_dir=tmp_path,
            verify=False,  # the fault in the load is the test, not the server's answers
        )
    )


def test_a_killed_load_generator_fails_its_step_with_the_reason_and_nothing_hangs(
    tmp_path: Path,
) -> None:
    plan = aiohttp_long_step_plan(tmp_path)
    reporter = KillDuringFirstStep(the_wrk)
    run = Runner(plan, reporter).run()
    [case] = run.cases
    [step] = case.steps
    wrk_pid, killed_at = reporter.killed[0]
    # the step had no figures, so it ran once more: measured, the first
    # attempt's reason kept beside them
    assert step.figures.retried.first_error == f"wrk (pid {wrk_pid}) was killed by SIGKILL"
    assert step.replies > 0 and "step_lost" not in step.flags
    assert case.status_text == "ok"
    # no hang: the retry's step, then the case ends
    retry_s = WRK_KILL_STEP["ramp.duration_s"]
    assert reporter.cases_finished[0] - killed_at < retry_s + contract.SHUTDOWN_GRACE_S + 5
    assert run.status == "complete"


def test_a_step_killed_twice_is_lost_and_its_case_says_so(tmp_path: Path) -> None:
    """The retry's wrk killed too: the step has no figures, is flagged step_lost, and the
    case reads `incomplete: 1 step lost` (never a plain ok)."""
    plan = aiohttp_long_step_plan(tmp_path)
    reporter = KillDuringFirstStep(the_wrk, attempts=2)
    run = Runner(plan, reporter).run()
    [case] = run.cases
    [step] = case.steps
    (first_pid, _), (second_pid, _) = reporter.killed
    assert step.figures.driver_error == f"wrk (pid {second_pid}) was killed by SIGKILL"
    assert step.figures.retried.first_error == f"wrk (pid {first_pid}) was killed by SIGKILL"
    assert step.errors == {"total": 1, "aborted": 1}
    assert "step_lost" in step.flags and "step_lost" in case.summary.flags
    assert case.status == "ok" and case.status_text == "incomplete: 1 step lost"
    assert sorted(p.name for p in (tmp_path / run.run_id).rglob("raw/step000*")) == [
        "step000-0.txt",
        "step000-retry-0.txt",
    ]


class StopDatabaseDuringFirstStep(SilentReporter):
    """SIGKILLs the run's database 1 s into the first step and restarts it, on the same port
    and data, `down_s` later: the server meets a database that is gone, then back.

    The restart runs on a thread that lives until `close()`: a child dies with the thread
    that started it (drivers/processes.py, the parent-death signal)."""

    def __init__(self, database: FerretDB, down_s: float) -> None:
        self.database = database
        self.down_s = down_s
        self.restarted: FerretDB | None = None
        self.steps: list[Step] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        if index == 0 and self._thread is None:
            self._thread = threading.Thread(target=self._stop_and_restart, daemon=True)
            self._thread.start()

    def _stop_and_restart(self) -> None:
        port, data_dir = self.database.port, self.database.workdir
        assert data_dir is not None
        if self._done.wait(1.0):
            return
        os.killpg(self.database.process.pid, signal.SIGKILL)
        self.database.process.wait()
        if self._done.wait(self.down_s):
            return
        self.restarted = FerretDB(data_dir, port=port)
        self._done.wait()
        self.restarted.stop()

    def step_finished(self, *, step: Step) -> None:
        self.steps.append(step)

    def close(self) -> None:
        """Stop the restarted database (on its own thread) and the original if it lives."""
        self._done.set()
        if self._thread is not None:
            self._thread.join(10)
        self.database.stop()


def test_a_database_stopped_mid_step_costs_503s_and_loses_no_acknowledged_record(
    tmp_path: Path,
) -> None:
    """The mongo sink's database dies for 2 s in step 0: its /log requests are answered 503
    (counted as errors), nothing acknowledged is lost, and step 1 is served as before."""
    require_framework("aiohttp")
    require_tools("wrk")
    require_ferretdb()
    database = FerretDB(tmp_path / "db")
    steps = {"ramp.duration_s": 6, "ramp.start": 10, "ramp.stop": 20, "ramp.step": 10}
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={"scenario": "log", "sink": "mongo", "warmup_s": 0, "cooldown_s": 0, **steps},
            results_dir=tmp_path / "results",
            mongo_url=database.url,
            verify=False,  # the fault in the load is the test, not the server's answers
        )
    )
    reporter = StopDatabaseDuringFirstStep(database, down_s=2.0)
    try:
        run = Runner(plan, reporter).run()
    finally:
        reporter.close()
    assert reporter.restarted is not None, "the database was not restarted"
    [case] = run.cases
    assert case.status == "ok", case.error
    during, after = case.steps
    assert during.errors.get("total", 0) > 0, during.errors  # the 503s, counted
    assert after.errors.get("total", 0) == 0, after.errors  # serving as before
    assert after.replies > 0
    assert case.reconcile is not None
    assert case.reconcile["lost"] == 0, case.reconcile
    assert run.status == "complete"


# -- the supervisor of --workers N ------------------------------------------------------------
@pytest.mark.parametrize("framework", one_per_runtime(SUPERVISED_SERVERS))
def test_a_dead_worker_stops_the_server_at_once_with_its_reason(framework: str) -> None:
    require_framework(framework)
    server = start_server(framework, workers=2)
    try:
        workers = sorted(psutil.Process(server.pid).children(), key=lambda p: p.pid)
        assert len(workers) == 2
        workers[1].kill()
        started = time.monotonic()
        status = server.process.wait(contract.SHUTDOWN_GRACE_S + 1)
        assert time.monotonic() - started < contract.SHUTDOWN_GRACE_S
        assert status == 1
        assert "worker 1" in server.stderr_tail()
        assert "was killed by SIGKILL: stopping the other workers" in server.stderr_tail()
        assert not workers[0].is_running() or workers[0].status() == psutil.STATUS_ZOMBIE
    finally:
        server.stop()


# -- a second Ctrl-C while a server is being stopped -----------------------------------------
def test_a_second_ctrl_c_during_a_stop_still_kills_the_group() -> None:
    # a "server" that ignores SIGTERM, with a child in its group: only the group kill ends it
    server = ServerProcess(["sh", "-c", "trap '' TERM; sleep 30 & wait"], "stubborn", 1)

    def stub_group() -> list[psutil.Process] | None:
        stub = psutil.Process(server.pid)
        children = stub.children()
        return [stub, *children] if children else None

    group = wait_until(stub_group, 5, "the stub's child")

    def second_ctrl_c(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, second_ctrl_c)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.stop(timeout_s=3)
        psutil.wait_procs(group, timeout=1)
        still_running = [p for p in group if alive(p)]  # a zombie is dead, awaiting its reaper
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # the test's own cleanup, after the check
    assert not still_running

"""A case as a pipeline (harness.run.pipeline, harness.run.case_state): the first phase
that ends the case ends it, no later phase runs, what the phases opened is released on
every path, and the outcome becomes the recorded Case in one place. Small real phase
functions, and the case's own prepare phase on a real run context; no process runs."""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.profile import load_profile
from harness.run.case import CASE_PHASES, run_case
from harness.run.case_state import CaseState, case_record
from harness.run.context import Measured, RunContext
from harness.run.ledger import SinkLedger
from harness.run.pipeline import PHASES, CaseEnd, PhaseStep, run_pipeline
from harness.run.plan import Plan, SilentReporter
from harness.topology import ProcessModel
from model.results import LATENCY_KEYS, Step, Summary
from model.scenarios import get_scenario


@dataclass
class Journal:
    """A pipeline state that writes down what ran and what was released."""

    held: ExitStack = field(default_factory=ExitStack)
    ran: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)


def opens(name: str) -> PhaseStep[Journal]:
    """A phase that opens a resource named `name` (released when the pipeline ends)."""

    def run(state: Journal) -> CaseEnd | None:
        state.ran.append(name)
        state.held.callback(state.released.append, name)
        return None

    return PhaseStep("start", run)


def goes_on(phase: str) -> PhaseStep[Journal]:
    def run(state: Journal) -> CaseEnd | None:
        state.ran.append(phase)
        return None

    return PhaseStep(phase, run)  # type: ignore[arg-type]


def ends(phase: str, kind: str, reason: str) -> PhaseStep[Journal]:
    def run(state: Journal) -> CaseEnd | None:
        state.ran.append(phase)
        return CaseEnd(phase, kind, reason)  # type: ignore[arg-type]

    return PhaseStep(phase, run)  # type: ignore[arg-type]


def raises(phase: str, fault: BaseException) -> PhaseStep[Journal]:
    def run(state: Journal) -> CaseEnd | None:
        state.ran.append(phase)
        raise fault

    return PhaseStep(phase, run)  # type: ignore[arg-type]


# -- control flow ------------------------------------------------------------------------
def test_every_phase_runs_in_order_and_the_case_goes_through() -> None:
    state = Journal()
    end = run_pipeline(state, [goes_on("prepare"), opens("server"), goes_on("measure")])
    assert end is None
    assert state.ran == ["prepare", "server", "measure"]
    assert state.released == ["server"]


def test_a_phase_that_ends_the_case_is_the_last_to_run() -> None:
    state = Journal()
    steps = [
        opens("store"),
        opens("server"),
        ends("verify", "failed", "verify failed: json: wrong body"),
        goes_on("measure"),
        goes_on("reconcile"),
    ]
    end = run_pipeline(state, steps)
    assert end == CaseEnd("verify", "failed", "verify failed: json: wrong body")
    assert state.ran == ["store", "server", "verify"]
    assert state.released == ["server", "store"]  # the last opened first


@pytest.mark.parametrize("fault", [KeyboardInterrupt(), RuntimeError("monitor broke")])
def test_what_was_opened_is_released_when_a_phase_raises(fault: BaseException) -> None:
    state = Journal()
    with pytest.raises(type(fault)):
        run_pipeline(state, [opens("store"), opens("server"), raises("measure", fault)])
    assert state.ran == ["store", "server", "measure"]
    assert state.released == ["server", "store"]


def test_a_release_is_told_what_interrupted_the_case() -> None:
    seen: list[type[BaseException] | None] = []

    def start(state: Journal) -> CaseEnd | None:
        state.held.push(lambda kind, value, traceback: bool(seen.append(kind)))
        return None

    with pytest.raises(KeyboardInterrupt):
        run_pipeline(Journal(), [PhaseStep("start", start), raises("measure", KeyboardInterrupt())])
    assert seen == [KeyboardInterrupt]  # the server is then stopped at once


def test_an_end_needs_a_known_phase_a_known_kind_and_a_reason() -> None:
    assert PHASES == (
        "prepare", "start", "probe", "verify", "measure", "stop", "annotate", "reconcile"
    )  # fmt: skip
    with pytest.raises(ValueError, match="phase 'warmup'"):
        CaseEnd("warmup", "failed", "why")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="end kind 'ok'"):
        CaseEnd("measure", "ok", "why")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a reason"):
        CaseEnd("measure", "failed", "")


# -- the outcome as the recorded Case ----------------------------------------------------
def run_context(tmp_path: Path, **profile_changes: object) -> RunContext:
    profile = dataclasses.replace(load_profile("smoke"), **profile_changes)  # type: ignore[arg-type]
    plan = Plan(profile, ("nginx",), "0", "1", tmp_path, "run-1", verify=False)
    return RunContext(plan, get_scenario(profile.scenario), SilentReporter())


def a_step(replies: int = 100) -> Step:
    return Step(
        offered=10.0,
        unit="req/s",
        achieved=10.0,
        replies=replies,
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=dict.fromkeys(LATENCY_KEYS),
    )


def state_of(tmp_path: Path) -> CaseState:
    return CaseState(run_context(tmp_path), "nginx", "both", ProcessModel("single"), "h1")


def test_an_early_end_is_the_case_status_and_error_with_what_the_phases_found(
    tmp_path: Path,
) -> None:
    state = state_of(tmp_path)
    state.affinity["server"] = "0"
    state.verify = {"protocol": {"ok": False, "detail": "h2c: no SETTINGS after the preface"}}
    case = case_record(state, CaseEnd("probe", "failed", "verify failed: protocol: h2c: no"))
    assert (case.status, case.error) == ("failed", "verify failed: protocol: h2c: no")
    assert case.verify == state.verify
    assert case.affinity == {"mode": "both", "server": "0", "agent": None}
    assert case.steps == () and case.summary == Summary() and case.reconcile is None
    assert (case.framework, case.scenario, case.sink, case.protocol) == (
        "nginx", "text", "empty", "h1"
    )  # fmt: skip


def test_a_case_every_phase_ran_is_ok_with_its_steps_and_the_sinks_audit(
    tmp_path: Path,
) -> None:
    state = state_of(tmp_path)
    state.measured = Measured((a_step(),), Summary(peak=10.0), "1")
    state.ledger = SinkLedger({"sent": 100, "stored": 100, "lost": 0}, {"sink": "file"})
    case = case_record(state, None)
    assert (case.status, case.error) == ("ok", None)
    assert case.steps == (a_step(),)
    assert case.summary.peak == 10.0 and case.summary.sink_store == {"sink": "file"}
    assert case.reconcile == {"sent": 100, "stored": 100, "lost": 0}


def test_a_lost_record_fails_a_measured_case_with_its_figures_kept(tmp_path: Path) -> None:
    state = state_of(tmp_path)
    state.measured = Measured((a_step(),), Summary(peak=10.0), "1")
    error = "lost 3 of 100 acknowledged records in the file sink"
    state.ledger = SinkLedger({"sent": 100, "stored": 97, "lost": 3}, {"sink": "file"}, error)
    case = case_record(state, CaseEnd("reconcile", "failed", error))
    assert (case.status, case.error) == ("failed", error)
    assert case.steps == (a_step(),) and case.reconcile == {"sent": 100, "stored": 97, "lost": 3}


# -- the case's own phases ---------------------------------------------------------------
def test_a_framework_without_the_sink_is_skipped_in_prepare_and_nothing_starts(
    tmp_path: Path,
) -> None:
    run = run_context(tmp_path, sink="file")
    state = CaseState(run, "nginx", "both", ProcessModel("single"), "h1")
    end = run_pipeline(state, CASE_PHASES)
    assert end == CaseEnd("prepare", "skipped", "not supported: nginx has no file sink")
    assert state.ctx is None and state.server is None  # no later phase ran
    case = run_case(run, "nginx", "both", 0, ProcessModel("single"))
    assert (case.status, case.error) == ("skipped", "not supported: nginx has no file sink")
    assert case.affinity == {"mode": "both", "server": None, "agent": None}
    assert case.verify == {} and case.negotiated is None

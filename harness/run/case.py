"""One case: a framework started, verified, measured by its ramp's case kind, stopped —
a pipeline of phases (harness.run.pipeline), each in the module of its concern:
prepare (harness.run.case_prepare), start and stop (harness.run.case_server), probe and
verify (harness.run.case_verify), measure, annotate and reconcile
(harness.run.case_measure). Why a case ended is a value (`CaseEnd`), turned into the
recorded Case in one place (harness.run.case_state.case_record).

Never raises for the framework's faults: a missing framework is `skipped`, a server that
will not start or fails verify is `failed` with the reason. The case kind is chosen by
the ramp's kind through CASE_KINDS.

A case speaks one protocol (h1, h1-tls, h2, h2c). A server that does not list it, or a
process model that cannot carry it (lb:N: cleartext h1 only), is `skipped: not
supported: <why>`, never run on another protocol. Right after the server starts, one
probe connection of the harness reads what it negotiated (harness.tls.probe_tls: TLS
version, cipher, key type, ALPN; h2c: the preface answered), recorded as the case's
`negotiated` and checked as its `protocol` verify entry: a TLS handshake that fails, or
an h2 server that does not select ALPN h2, fails the case, but for a command on trial for
h2 or h2c (it did not declare its protocols: harness.negotiation), which is skipped with
what the probe found. Verify then speaks the case's protocol (harness.verify's Endpoint):
the route checks, and the protocol's own (TLS, HTTP/2) but the ones `harness verify
--protocol` keeps to itself (`case_checks`).

A server given as a command is probed for the routes it serves once it runs
(harness.verify.served_routes): a scenario on a route it answers 404 is `skipped: not
supported`, as for a baseline. It writes no telemetry line, so its figures that need one
(tick lag, the server's own counters) are empty and the summary's `limit_note` says why.
"""

from __future__ import annotations

from harness.run.case_measure import CASE_KINDS, NO_TELEMETRY_NOTE, annotate, measure, reconcile
from harness.run.case_prepare import prepare
from harness.run.case_server import (
    INTERRUPTED_STOP_S,
    NO_CGROUP_MEMORY,
    cgroup_record,
    load_cgroup,
    load_generators_in,
    server_cgroup,
    start,
    stop,
)
from harness.run.case_state import CaseState, case_record, new_case
from harness.run.case_verify import RUN_VERIFY_LEFT_OUT, case_checks, probe, probe_protocol, verify
from harness.run.context import RunContext
from harness.run.pipeline import PhaseStep, run_pipeline
from harness.topology import ProcessModel
from model.results import Case
from servers.contract import PROTOCOL_H1

# the phases once the case is prepared: from the server's start to the sink's audit
SERVED_PHASES: tuple[PhaseStep[CaseState], ...] = (
    PhaseStep("start", start),
    PhaseStep("probe", probe),
    PhaseStep("verify", verify),
    PhaseStep("measure", measure),
    PhaseStep("stop", stop),
    PhaseStep("annotate", annotate),
    PhaseStep("reconcile", reconcile),
)
CASE_PHASES: tuple[PhaseStep[CaseState], ...] = (PhaseStep("prepare", prepare), *SERVED_PHASES)

# named here still for the code that imports them from here
__all__ = [
    "CASE_KINDS",
    "CASE_PHASES",
    "INTERRUPTED_STOP_S",
    "NO_CGROUP_MEMORY",
    "NO_TELEMETRY_NOTE",
    "RUN_VERIFY_LEFT_OUT",
    "SERVED_PHASES",
    "case_checks",
    "case_label",
    "cgroup_record",
    "load_cgroup",
    "load_generators_in",
    "new_case",
    "probe_protocol",
    "run_case",
    "server_cgroup",
]


def case_label(
    run: RunContext,
    framework: str,
    mode: str,
    repeat: int,
    model: ProcessModel,
    round_label: str | None,
    protocol: str,
) -> str:
    """The case's name in the progress: `aiohttp [both] #2 workers:2 h1-tls round 2 of 5`
    (the repeat, process model and protocol where the run has several)."""
    profile = run.profile
    label = f"{framework} [{mode}]" + (f" #{repeat + 1}" if profile.repeat > 1 else "")
    if len(profile.process_models) > 1:
        label += f" {model.name}"
    if len(profile.protocols) > 1 or protocol != PROTOCOL_H1:
        label += f" {protocol}"
    if round_label is not None:
        label += f" {round_label}"
    return label


def run_case(
    run: RunContext,
    framework: str,
    mode: str,
    repeat: int,
    model: ProcessModel,
    round_label: str | None = None,
    protocol: str = PROTOCOL_H1,
) -> Case:
    """One framework through the whole ramp under one affinity mode, process model and
    protocol.

    `round_label` ("round 2 of 5") marks a confirmation round (harness.run.rounds): its
    files go to a folder of its own beside the ramp's, in the case's folder
    (harness.run.outputs.case_folder).
    """
    label = case_label(run, framework, mode, repeat, model, round_label, protocol)
    run.reporter.case_started(label=label, steps=len(list(run.profile.ramp)))
    state = CaseState(run, framework, mode, model, protocol, repeat, round_label)
    return case_record(state, run_pipeline(state, CASE_PHASES))

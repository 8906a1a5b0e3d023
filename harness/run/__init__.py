"""The runner, split by what it runs.

- plan.py: the Plan, run ids, default CPUs, the Reporter protocol
- loop.py: `Runner`, the loop over cases that writes run.json after each
- case.py: one case as a pipeline of phases (pipeline.py: the phases, `CaseEnd`, the
  runner that releases what they opened on every path), each phase in its own module:
  - case_prepare.py: prepare (can the framework run it; its folder and sink store)
  - case_server.py: start and stop (the server in its cgroup, its monitor)
  - case_verify.py: probe (what it negotiates, a command's routes) and verify
  - case_measure.py: measure (CASE_KINDS, the case kind for each ramp kind), annotate,
    reconcile
  - case_state.py: what the phases find, and the outcome as the recorded Case
  - http_case.py: HTTP steps (rate and concurrency ramps, the memcached scenario's), with
    step_runners.py (who runs a step's load), step_records.py, step_cpu.py
  - connection_case.py: connection ramps (WebSocket scenarios, with harness.connections)
  - attack_case.py: the h2-attacks rounds (paced h2load without and with one attacking
    HTTP/2 connection), with attack_figures.py (the rounds' pairs and each attack's
    retention: pure)
- context.py: RunContext and CaseContext (frozen), Measured (what a case kind returns)
- analysis.py: every figure below named in one place:
  - bottleneck.py: what limited a step (noise, driver, server, quota, database)
  - peak.py: the peak and what was measured there, the knee, repeats combined
  - round_figures.py: confirmation rounds as figures, with their intervals
  - ratios.py: ratios to nginx, the TLS tax
- rounds.py: confirmation rounds at each peak, interleaved, to a precision when asked
- precision.py: the precision's rules (stopping, round length, outlier rounds, the noise
  source), pure
- ledger.py: nothing lost, the sink audited against what was acknowledged
- outputs.py: steps.csv
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.run.case import CASE_KINDS
    from harness.run.loop import Runner
    from harness.run.peak import combine_repeats, summarize
    from harness.run.plan import (
        Plan,
        Reporter,
        SilentReporter,
        claim_run_dir,
        default_cpus,
        new_run_id,
    )
    from harness.run.ratios import with_baseline_ratios

# Each name's module, imported when the name is first read: importing one light module of
# the package (the plan, to check a command line) does not load the runner, its verifiers
# and their HTTP clients.
_HOMES = {
    "CASE_KINDS": "harness.run.case",
    "Runner": "harness.run.loop",
    "combine_repeats": "harness.run.peak",
    "summarize": "harness.run.peak",
    "Plan": "harness.run.plan",
    "Reporter": "harness.run.plan",
    "SilentReporter": "harness.run.plan",
    "claim_run_dir": "harness.run.plan",
    "default_cpus": "harness.run.plan",
    "new_run_id": "harness.run.plan",
    "with_baseline_ratios": "harness.run.ratios",
}


def __getattr__(name: str) -> object:
    """The package's names, each from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "CASE_KINDS",
    "Plan",
    "Reporter",
    "Runner",
    "SilentReporter",
    "claim_run_dir",
    "combine_repeats",
    "default_cpus",
    "new_run_id",
    "summarize",
    "with_baseline_ratios",
]

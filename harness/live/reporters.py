"""The reporters of a watched run: several as one, and the one that feeds the live state.

Kept apart from the servers (harness.live.server) so that the runner's side imports no web
library: a run without `--live` or `--prometheus` loads nothing of them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.live.state import LiveState, settled_cases
from model.results import READ_ERRORS, Case, Step, read_run

if TYPE_CHECKING:
    from harness.run.plan import Reporter


class Reporters:
    """Several reporters as one: each event goes to each, in order (the console first)."""

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = reporters

    def preparing(self, *, what: str, done: int, total: int) -> None:
        for reporter in self.reporters:
            reporter.preparing(what=what, done=done, total=total)

    def case_started(self, *, label: str, steps: int) -> None:
        for reporter in self.reporters:
            reporter.case_started(label=label, steps=steps)

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        for reporter in self.reporters:
            reporter.step_started(index=index, offered=offered, unit=unit)

    def sample(self, *, row: dict[str, Any]) -> None:
        for reporter in self.reporters:
            reporter.sample(row=row)

    def step_finished(self, *, step: Step) -> None:
        for reporter in self.reporters:
            reporter.step_finished(step=step)

    def case_finished(self, *, case: Case) -> None:
        for reporter in self.reporters:
            reporter.case_finished(case=case)


class LiveReporter:
    """The reporter that feeds the live state; after each case, the run's cases as
    run.json now combines them (peaks with their intervals as rounds come in).

    A watcher never ends a run: should feeding the state fail, that is said once on
    stderr and the live view stops where it was, while the run goes on."""

    def __init__(self, state: LiveState, run_dir: Path | None) -> None:
        self.state = state
        self.run_dir = run_dir
        self.broken: str | None = None  # why the live view stopped (None: it did not)

    def _feed(self, event: Callable[[], None]) -> None:
        if self.broken is not None:
            return
        try:
            event()
        except Exception as error:
            self.stop(error)

    def stop(self, error: Exception) -> None:
        """The live view stops where it is, said once on stderr; the run goes on."""
        if self.broken is not None:
            return
        self.broken = f"{type(error).__name__}: {error}"
        with contextlib.suppress(OSError):
            print(f"harness: the live view stopped ({self.broken})", file=sys.stderr)

    def preparing(self, *, what: str, done: int, total: int) -> None:
        self._feed(lambda: self.state.preparing(what=what, done=done, total=total))

    def case_started(self, *, label: str, steps: int) -> None:
        self._feed(lambda: self.state.case_started(label=label, steps=steps))

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        self._feed(lambda: self.state.step_started(index=index, offered=offered, unit=unit))

    def sample(self, *, row: dict[str, Any]) -> None:
        self._feed(lambda: self.state.sample(row=row))

    def step_finished(self, *, step: Step) -> None:
        self._feed(lambda: self.state.step_finished(step=step))

    def case_finished(self, *, case: Case) -> None:
        self._feed(lambda: self.state.case_finished(case=case))
        if self.run_dir is not None:  # a bench's run.json has no cases of a run to settle
            self._feed(self._settle)

    def bench_round(self, *, row: dict[str, Any]) -> None:
        """A bench's round ended: ours / minimal so far (harness.bench_live.round_row)."""
        self._feed(lambda: self.state.bench_round(row=row))

    def _settle(self) -> None:
        """The run's cases from run.json, which the runner wrote just before (a torn or
        missing file: nothing new)."""
        if self.run_dir is None:
            return
        with contextlib.suppress(*READ_ERRORS, OSError):
            self.state.settle(settled_cases(read_run(self.run_dir).cases))

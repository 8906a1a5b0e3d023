"""What a run has shown so far, held for the live page and the Prometheus exporter.

`LiveState` takes the runner's reporter events (harness.run.plan.Reporter) and keeps only
what the monitor already produced: the newest merged row of each second, each finished
step's figures, the flags as steps raise them, and each finished case. It does no
measuring of its own; its methods take a lock for a few appends, so the monitor's thread
and the runner's never wait on a reader. Readers (`snapshot`, the exporter's collector)
copy under the same lock and do their work outside it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from model.results import FLAG_MEANINGS, Case, Step
from servers.contract import PROTOCOL_H1, PROTOCOLS

# a case's series keeps at most this many points; past it every other point is dropped
# (a 44-minute connection ramp at one point a second stays a few tens of kB)
MAX_POINTS_PER_CASE = 1200
# the flags list the page shows (the newest); every flag still counts in `flag_counts`
MAX_FLAG_EVENTS = 200

# "aiohttp [both] #2 workers:2 h1-tls round 2 of 5" (harness.run.case.run_case's label)
_ROUND = re.compile(r"\bround (\d+)(?: of (\d+))?")


@dataclass(frozen=True)
class CaseLabel:
    """What a case label names: the framework, its protocol and the round (None: the ramp)."""

    text: str
    framework: str
    protocol: str
    round: int | None = None


def parse_case_label(label: str) -> CaseLabel:
    """The framework (the label's first word), the protocol (a word naming one, else h1)
    and the confirmation round of a label as harness.run.case.run_case writes it."""
    words = label.split()
    framework = words[0] if words else label
    protocol = next((w for w in words[1:] if w in PROTOCOLS), PROTOCOL_H1)
    found = _ROUND.search(label)
    return CaseLabel(label, framework, protocol, int(found.group(1)) if found else None)


@dataclass
class CaseSeries:
    """One case as it runs: a point a second, and its finished steps."""

    label: CaseLabel
    steps_planned: int
    started_s: float  # on the state's clock
    # each point: [seconds since the case started, req/s, open connections, server CPU %,
    # RSS bytes, tick lag ms]; a figure the server does not report is None
    points: list[list[float | None]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"  # then the case's: ok, failed or skipped
    error: str | None = None
    # counters over the case, for the exporter: replies and errors by kind (finished
    # steps, the driver's count) and the requests the server itself counted (telemetry)
    replies_total: int = 0
    errors_total: dict[str, int] = field(default_factory=dict)
    server_requests_total: int = 0
    last_requests: int | None = None
    last_row: dict[str, Any] = field(default_factory=dict)

    def add_point(self, point: list[float | None]) -> None:
        self.points.append(point)
        if len(self.points) > MAX_POINTS_PER_CASE:
            self.points = self.points[::2]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class LiveState:
    """The run so far, fed by reporter events from the runner's and the monitor's threads."""

    def __init__(
        self,
        *,
        run_id: str,
        profile: str,
        frameworks: tuple[str, ...],
        cases_total: int,
        step_s: float | None,
        round_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        kind: str = "run",
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._changed = threading.Condition(self._lock)
        self.version = 0  # bumped on every change: readers wait for it to move
        self.run_id = run_id
        self.kind = kind  # run (compare, run) or bench (ours against the minimal app)
        self.profile = profile
        self.frameworks = frameworks
        self.cases_total = cases_total
        self.step_s = step_s  # a ramp step's planned length (None: not known ahead)
        self.round_s = round_s  # a confirmation round's (a precision may lengthen it)
        self.started_s = clock()
        self.status = "starting"  # preparing, running, then the run's own status
        self.preparing_text = ""
        self.cases: list[CaseSeries] = []
        self.step: dict[str, Any] | None = None  # the step running: index, offered, unit
        self.step_started_s: float | None = None
        self.flags: list[dict[str, Any]] = []
        self.flag_counts: dict[str, int] = {}
        self.settled: list[dict[str, Any]] = []  # the run's cases, combined (run.json)
        self.case_seconds: list[float] = []  # each finished case's wall time
        self.report_url: str | None = None
        # a bench's rows, by (framework, protocol, figure): each round's figure of ours and
        # minimal and their ratio so far (harness.bench_live.round_row)
        self.bench: dict[tuple[str, str, str], dict[str, Any]] = {}

    # -- events (the Reporter protocol's, and the run's end) -------------------------
    def _bump(self) -> None:
        self.version += 1
        self._changed.notify_all()

    def preparing(self, *, what: str, done: int, total: int) -> None:
        with self._lock:
            self.status = "preparing"
            self.preparing_text = f"{what} {done}/{total}"
            self._bump()

    def case_started(self, *, label: str, steps: int) -> None:
        with self._lock:
            self.status = "running"
            self.cases.append(CaseSeries(parse_case_label(label), steps, self._clock()))
            self.step = None
            self.step_started_s = None
            self._bump()

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        with self._lock:
            self.step = {"index": index, "offered": offered, "unit": unit}
            self.step_started_s = self._clock()
            self._bump()

    def sample(self, *, row: dict[str, Any]) -> None:
        with self._lock:
            if not self.cases:
                return
            case = self.cases[-1]
            case.last_row = row
            requests = row.get("requests")
            if isinstance(requests, int):
                if case.last_requests is not None and requests >= case.last_requests:
                    case.server_requests_total += requests - case.last_requests
                case.last_requests = requests
            case.add_point(
                [
                    round(self._clock() - case.started_s, 1),
                    _number(row.get("requests_per_s")),
                    _number(row.get("open")),
                    _number(row.get("server_cpu_pct")),
                    _number(row.get("server_rss_bytes")),
                    _number(row.get("tick_max_ms")),
                ]
            )
            self._bump()

    def step_finished(self, *, step: Step) -> None:
        with self._lock:
            if not self.cases:
                return
            case = self.cases[-1]
            index = self.step["index"] if self.step else len(case.steps)
            case.steps.append(
                {
                    "index": index,
                    "t": round(self._clock() - case.started_s, 1),
                    "offered": step.offered,
                    "unit": step.unit,
                    "achieved": step.achieved,
                    "replies": step.replies,
                    "errors": dict(step.errors),
                    "p50_ms": step.latency_ms.get("p50"),
                    "p99_ms": step.latency_ms.get("p99"),
                    "flags": list(step.flags),
                }
            )
            case.replies_total += step.replies
            for kind, count in step.errors.items():  # every kind the driver counts, 0 too
                if kind != "total":
                    case.errors_total[kind] = case.errors_total.get(kind, 0) + count
            for flag in step.flags:
                self._raise_flag(case.label.text, index, flag, FLAG_MEANINGS.get(flag, ""))
            self.step = None
            self.step_started_s = None
            self._bump()

    def _raise_flag(self, case: str, step: int | None, flag: str, meaning: str) -> None:
        self.flag_counts[flag] = self.flag_counts.get(flag, 0) + 1
        elapsed_s = round(self._clock() - self.started_s)
        self.flags.append(
            {"t": elapsed_s, "case": case, "step": step, "flag": flag, "meaning": meaning}
        )
        del self.flags[:-MAX_FLAG_EVENTS]

    def case_finished(self, *, case: Case) -> None:
        with self._lock:
            if not self.cases:
                return
            series = self.cases[-1]
            series.status = case.status
            series.error = case.error
            self.case_seconds.append(self._clock() - series.started_s)
            if case.status != "ok":
                self._raise_flag(series.label.text, None, case.status, case.error or "")
            self.step = None
            self._bump()

    def settle(self, cases: list[dict[str, Any]]) -> None:
        """The run's cases as run.json now has them (repeats combined, intervals from the
        rounds so far)."""
        with self._lock:
            self.settled = cases
            self._bump()

    def bench_round(self, *, row: dict[str, Any]) -> None:
        """A bench's round ended: its figure's row replaces the one before."""
        with self._lock:
            self.bench[(row["framework"], row["protocol"], row["figure"])] = row
            self._bump()

    def finished(self, status: str, report_url: str | None) -> None:
        """The run ended with `status`; its report is at `report_url` (None: none drawn)."""
        with self._lock:
            self.status = status
            self.report_url = report_url
            self.step = None
            self._bump()

    def wake(self) -> None:
        """Wake every reader waiting for a change (the servers are stopping)."""
        with self._lock:
            self._changed.notify_all()

    # -- readers ---------------------------------------------------------------------
    def wait_change(self, since: int, timeout_s: float) -> int:
        """The version once it moved past `since`, or after `timeout_s` whatever it is."""
        with self._changed:
            self._changed.wait_for(lambda: self.version != since, timeout_s)
            return self.version

    def time_left(self) -> dict[str, float | None]:
        """Seconds left in the step running (from its planned length) and in the run (the
        cases left at the finished cases' mean length); None where not yet known."""
        with self._lock:
            return self._time_left()

    def _time_left(self) -> dict[str, float | None]:
        now = self._clock()
        step_left = None
        in_round = bool(self.cases) and self.cases[-1].label.round is not None
        planned_s = self.round_s if in_round else self.step_s
        if planned_s is not None and self.step_started_s is not None:
            step_left = max(0.0, planned_s - (now - self.step_started_s))
        run_left = None
        if self.case_seconds and self.status == "running":
            mean_s = sum(self.case_seconds) / len(self.case_seconds)
            finished = len(self.case_seconds)
            running = len(self.cases) > finished
            left = max(0, self.cases_total - finished) * mean_s
            if running:
                left -= min(mean_s, now - self.cases[-1].started_s)
            run_left = max(0.0, left)
        return {"step_s": step_left, "run_s": run_left}

    def snapshot(self) -> dict[str, Any]:
        """Everything the page draws, as JSON-ready data."""
        with self._lock:
            current = self.cases[-1] if self.cases and self.cases[-1].status == "running" else None
            return {
                "version": self.version,
                "kind": self.kind,
                "run_id": self.run_id,
                "profile": self.profile,
                "frameworks": list(self.frameworks),
                "status": self.status,
                "preparing": self.preparing_text,
                "elapsed_s": round(self._clock() - self.started_s),
                "cases_total": self.cases_total,
                "cases_done": len(self.case_seconds),
                "current": None
                if current is None
                else {
                    "case": current.label.text,
                    "framework": current.label.framework,
                    "protocol": current.label.protocol,
                    "round": current.label.round,
                    "steps": current.steps_planned,
                    "steps_done": len(current.steps),
                    "step": self.step,
                    "row": _page_row(current.last_row),
                    "last_step": current.steps[-1] if current.steps else None,
                },
                "time_left": self._time_left(),
                "series": [
                    {
                        "case": c.label.text,
                        "framework": c.label.framework,
                        "protocol": c.label.protocol,
                        "status": c.status,
                        "error": c.error,
                        "steps_planned": c.steps_planned,
                        "points": list(c.points),
                        "steps": list(c.steps),
                    }
                    for c in self.cases
                ],
                "flags": list(self.flags),
                "flag_counts": dict(self.flag_counts),
                "settled": list(self.settled),
                "bench": list(self.bench.values()),
                "report_url": self.report_url,
            }

    def metric_view(self) -> dict[str, Any]:
        """What the exporter reads at a scrape: every case's counters and the newest row
        of the case running, copied."""
        with self._lock:
            running = self.cases[-1] if self.cases and self.cases[-1].status == "running" else None
            return {
                "run_id": self.run_id,
                "profile": self.profile,
                "status": self.status,
                "cases_total": self.cases_total,
                "cases": [
                    {
                        "label": c.label,
                        "status": c.status,
                        "replies_total": c.replies_total,
                        "errors_total": dict(c.errors_total),
                        "server_requests_total": c.server_requests_total,
                        "steps_done": len(c.steps),
                        "last_step": dict(c.steps[-1]) if c.steps else None,
                    }
                    for c in self.cases
                ],
                "running": None
                if running is None
                else {"label": running.label, "row": dict(running.last_row), "step": self.step},
                "time_left": self._time_left(),
                "flag_counts": dict(self.flag_counts),
                "bench": [dict(row) for row in self.bench.values()],
            }


# the figures of a monitor row the page shows (the row has per-core and host columns too)
PAGE_ROW_KEYS = (
    "requests_per_s",
    "open",
    "server_cpu_pct",
    "server_rss_bytes",
    "tick_max_ms",
    "agent_cpu_pct",
    "db_cpu_pct",
)


def _page_row(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in PAGE_ROW_KEYS if key in row}


def settled_cases(cases: tuple[Case, ...]) -> list[dict[str, Any]]:
    """The run's cases as the page lists them: peak with its interval, p99, errors, flags."""
    rows = []
    for case in cases:
        summary = case.summary
        rows.append(
            {
                "framework": case.framework,
                "protocol": case.protocol,
                "process_model": case.process_model,
                "status": case.status,
                "error": case.error,
                "peak": summary.peak,
                "peak_unit": summary.peak_unit,
                "peak_ci": list(summary.peak_ci) if summary.peak_ci else None,
                "p99_ms": summary.p99_at_peak_ms,
                "p99_ci_ms": list(summary.p99_at_peak_ci_ms) if summary.p99_at_peak_ci_ms else None,
                "rounds": summary.rounds,
                "errors": summary.errors_total,
                "flags": list(summary.flags),
            }
        )
    return rows

"""Run history: the runs under results/ (`harness history`) and each framework's peak
across runs of one profile on one host (`harness trend`), with steps larger than noise.
A bench's run (model.bench) is listed beside compare's, its kind said; its trend is the
ratio ours / minimal across bench runs (`bench_trend_series`).

A **step** is a change between two consecutive runs of a series whose 95 % intervals
(`Summary.peak_ci`, from confirmation rounds) do not overlap: the rounds of the two runs
cannot both be right about one value. Without an interval on either side nothing is
called a step: a single ramp's peak carries no measure of its own noise.

Pure apart from reading run.json files; unit-tested on run.json files written with
model.results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charts.columns import figure_text
from harness.diff import SAME_HOST_FACTS, CaseIdentity, case_labels
from model.bench import BenchRun, read_result
from model.results import READ_ERRORS, Run


def read_run_or_problem(directory: Path) -> tuple[Run | BenchRun | None, str | None]:
    """The run (compare's or a bench's) in `directory`, or None and what is wrong with it,
    in a few words."""
    path = directory / "run.json"
    if not path.is_file():
        return None, "no run.json"
    try:
        return read_result(path), None
    except READ_ERRORS as error:
        return None, f"{type(error).__name__}: {error}"[:200]


def ratio_text(value: float | None, interval: tuple[float, float] | None) -> str:
    """`0.97× [0.95, 0.99]`: a ratio ours / minimal with its 95 % interval."""
    if value is None:
        return "–"
    return f"{value:.2f}×" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def _peak_text(value: float, interval: tuple[float, float] | None, unit: str) -> str:
    suffix = "" if unit == "req/s" else f" {unit}"
    return figure_text(value, interval, spec="{:,.0f}", suffix=suffix)


@dataclass(frozen=True)
class HistoryEntry:
    """One directory under results/: its compare run or its bench, or why it could not
    be read."""

    name: str
    run: Run | None
    problem: str | None = None
    bench: BenchRun | None = None

    @property
    def kind(self) -> str:
        """compare, `bench http` or `bench ws`; "" when unreadable."""
        if self.bench is not None:
            return f"bench {self.bench.kind}"
        return "compare" if self.run is not None else ""

    @property
    def profile(self) -> str:
        if self.bench is not None:
            return self.bench.profile
        return str((self.run.config.get("profile") or {}).get("name", "")) if self.run else ""

    @property
    def host(self) -> str:
        measured = self.run or self.bench
        return str(measured.host.get("hostname", "")) if measured else ""

    @property
    def status(self) -> str:
        measured = self.run or self.bench
        return measured.status if measured else "unreadable"

    @property
    def frameworks(self) -> list[str]:
        measured = self.run or self.bench
        return list(dict.fromkeys(c.framework for c in measured.cases)) if measured else []

    def bench_texts(self) -> list[tuple[str, str]]:
        """(`gevent req/s`, `0.97× [0.95, 0.99] within ≥ 0.95×`) for each bench figure."""
        if self.bench is None:
            return []
        return [
            (f"{case.label} {f.name}", f"{ratio_text(f.ratio, f.ratio_ci)} {f.verdict}")
            for case in self.bench.cases
            for f in case.figures
        ]

    def peaks(self) -> list[tuple[str, float, tuple[float, float] | None, str]]:
        """(case label, peak, its interval, its unit) for each case that peaked."""
        if self.run is None:
            return []
        labels = case_labels([c.identity for c in self.run.cases])
        return [
            (labels[c.identity], c.summary.peak, c.summary.peak_ci, c.summary.peak_unit)
            for c in self.run.cases
            if c.status == "ok" and c.summary.peak is not None
        ]

    def peak_texts(self) -> list[tuple[str, str]]:
        """(case label, `25,752 [24,100, 27,000]`) for each case that peaked; a bench's
        ratios ours / minimal (`bench_texts`)."""
        peaks = [(label, _peak_text(value, ci, unit)) for label, value, ci, unit in self.peaks()]
        return peaks + self.bench_texts()

    def to_dict(self) -> dict[str, Any]:
        if self.bench is not None:
            return {
                "run": self.name, "kind": self.kind, "run_id": self.bench.run_id,
                "started": self.bench.started, "profile": self.profile, "host": self.host,
                "status": self.status, "frameworks": self.frameworks,
                "ratios": [
                    {"case": c.label, "protocol": c.protocol, "figure": f.name,
                     "ratio": f.ratio, "ci": list(f.ratio_ci) if f.ratio_ci else None,
                     "verdict": f.verdict, "limit": f.limit_text}
                    for c in self.bench.cases for f in c.figures
                ],
            }  # fmt: skip
        if self.run is None:
            return {"run": self.name, "status": "unreadable", "problem": self.problem}
        return {
            "kind": self.kind,
            "run": self.name,
            "run_id": self.run.run_id,
            "started": self.run.started,
            "profile": self.profile,
            "host": self.host,
            "status": self.status,
            "frameworks": self.frameworks,
            "peaks": [
                {"case": label, "peak": value, "ci": list(ci) if ci else None, "unit": unit}
                for label, value, ci, unit in self.peaks()
            ],
        }


def list_history(results_dir: Path) -> list[HistoryEntry]:
    """Every run directory under `results_dir`, newest first: run ids begin with their UTC
    start (`20261130-170804.123-quick`), so the name orders them. Hidden directories and
    plain files are not runs; a directory whose run.json is missing or unreadable is
    listed with the reason."""
    directories = [p for p in results_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]
    entries = []
    for directory in sorted(directories, key=lambda p: p.name, reverse=True):
        found, problem = read_run_or_problem(directory)
        if isinstance(found, BenchRun):
            entries.append(HistoryEntry(directory.name, None, problem, bench=found))
        else:
            entries.append(HistoryEntry(directory.name, found, problem))
    return entries


@dataclass(frozen=True)
class TrendPoint:
    """One case's peak in one run."""

    run_id: str
    started: str
    value: float
    interval: tuple[float, float] | None


def host_key(run: Run | BenchRun) -> tuple[Any, ...]:
    return tuple(run.host.get(fact) for fact in SAME_HOST_FACTS)


@dataclass(frozen=True)
class TrendRuns:
    """The runs a trend draws, and those it left out (and why)."""

    profile: str
    host: str
    runs: tuple[Run | BenchRun, ...]  # oldest first
    other_hosts: int  # runs of the profile measured on another host
    unreadable: int  # directories that could not be read


def trend_runs(entries: Sequence[HistoryEntry], profile: str) -> TrendRuns:
    """The readable runs of `profile` (a bench's: `bench`, `bench-ws`) on the host of its
    newest run, oldest first."""
    same_profile = [
        measured
        for e in entries
        if (measured := e.run or e.bench) is not None and e.profile == profile
    ]
    if not same_profile:
        return TrendRuns(profile, "", (), 0, sum(e.problem is not None for e in entries))
    newest_host = host_key(same_profile[0])
    kept = [run for run in same_profile if host_key(run) == newest_host]
    return TrendRuns(
        profile,
        str(same_profile[0].host.get("hostname", "")),
        tuple(reversed(kept)),
        len(same_profile) - len(kept),
        sum(e.problem is not None for e in entries),
    )


def run_limits(run: Run) -> str:
    """The limits `run` held its servers to (`--cpu-quota`, `--memory-max`) as a label
    suffix, "" without: a capped run's peaks are another series, not a step in one."""
    parts = []
    if (quota := run.config.get("cpu_quota")) is not None:
        parts.append(f"--cpu-quota {quota:g}")
    if (memory := run.config.get("memory_max_bytes")) is not None:
        parts.append(f"--memory-max {memory / 2**20:g} MiB")
    return f" ({', '.join(parts)})" if parts else ""


def trend_series(runs: Sequence[Run]) -> dict[str, list[TrendPoint]]:
    """Each case's peak across `runs` (in their order), labelled by case: a run where the
    case failed or found no peak leaves a gap. Runs under limits (`run_limits`) give series
    of their own, labelled with them."""
    series: dict[tuple[CaseIdentity, str], list[TrendPoint]] = {}
    for run in runs:
        limits = run_limits(run)
        for case in run.cases:
            if case.status != "ok" or case.summary.peak is None:
                continue
            point = TrendPoint(run.run_id, run.started, case.summary.peak, case.summary.peak_ci)
            series.setdefault((case.identity, limits), []).append(point)
    labels = case_labels([identity for identity, _ in series])
    return {labels[identity] + limits: points for (identity, limits), points in series.items()}


def bench_trend_series(runs: Sequence[BenchRun]) -> dict[str, list[TrendPoint]]:
    """Each bench figure's ratio ours / minimal across `runs` (in their order), labelled
    `gevent req/s` (`gevent [h1-tls] req/s` off h1); a run without the case leaves a gap."""
    series: dict[str, list[TrendPoint]] = {}
    for run in runs:
        for case in run.cases:
            for figure in case.figures:
                if figure.ratio is None:
                    continue
                point = TrendPoint(run.run_id, run.started, figure.ratio, figure.ratio_ci)
                series.setdefault(f"{case.label} {figure.name}", []).append(point)
    return series


def bench_limits(runs: Sequence[BenchRun]) -> dict[str, float]:
    """Each bench series' limit (the label as `bench_trend_series` gives it)."""
    return {
        f"{case.label} {figure.name}": figure.limit
        for run in runs
        for case in run.cases
        for figure in case.figures
    }


def steps_beyond_noise(points: Sequence[TrendPoint]) -> list[int]:
    """The indices i where points[i - 1] → points[i] is a step: both have intervals and
    the intervals do not overlap."""
    steps = []
    for index in range(1, len(points)):
        before, after = points[index - 1].interval, points[index].interval
        if before and after and (after[0] > before[1] or after[1] < before[0]):
            steps.append(index)
    return steps

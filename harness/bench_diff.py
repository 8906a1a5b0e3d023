"""`harness diff` of two bench runs: each figure's ratio ours / minimal in run A (the base)
and in run B, and the change B / A with its 95 % interval.

A bench's ratio is the geometric mean of its rounds' ratios (each round ran ours and the
minimal app seconds apart: harness.stats.paired_ratio_interval). Two runs' rounds did not
run side by side, so the change is taken on the two sets of per-round ratios, unpaired:
B's geometric mean over A's, with Welch's t interval on the difference of their logs
(harness.stats.log_ratio_change_interval) and the same test's p (harness.stats.welch_log_p),
adjusted for the diff's number of figures by Holm's method as `harness diff` adjusts its
cases (harness.stats.holm_adjusted). The verdict is `better` or `worse` (for the figure:
a req/s ratio that rose, a KB/conn or CPU µs/conn ratio that fell, is better) when the
adjusted p < ALPHA and the interval excludes 1; `no significant change` otherwise; `no
rounds` when either side has fewer than two rounds with both figures.

Cases are matched on framework and protocol; two benches of different kinds (http, ws)
are not diffed. Pure functions of model.bench (unit-tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell, figure_text
from harness.stats import Interval, holm_adjusted, log_ratio_change_interval, welch_log_p
from model.bench import BenchFigure, BenchRun

ALPHA = 0.05
BENCH_RULE = (
    f"Welch's t on the logs of the rounds' ratios, p adjusted for the diff's figures (Holm) "
    f"< {ALPHA}, and the change's 95 % interval excludes 1"
)


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


@dataclass(frozen=True)
class BenchChange:
    """One figure of one case: its ratio ours / minimal in A and in B, and the change."""

    label: str  # `gevent req/s`, `gevent [h1-tls] req/s`
    better: str  # higher or lower: which way of the ratio is good
    old: float | None
    old_ci: tuple[float, float] | None
    new: float | None
    new_ci: tuple[float, float] | None
    change: Interval | None  # B / A with its 95 % interval
    p: float | None = None
    p_adjusted: float | None = None
    verdict: str = "no rounds"

    @property
    def ratio_change(self) -> float | None:
        """B / A of the two ratios (the interval's centre, or the ratios alone without one)."""
        if self.change is not None:
            return self.change.value
        return self.new / self.old if self.new and self.old else None

    def to_dict(self) -> dict[str, Any]:
        change = self.change
        return {
            "label": self.label, "better": self.better,
            "a": {"ratio": self.old, "ci": list(self.old_ci) if self.old_ci else None},
            "b": {"ratio": self.new, "ci": list(self.new_ci) if self.new_ci else None},
            "change": _rounded(self.ratio_change),
            "change_ci": [round(change.low, 4), round(change.high, 4)] if change else None,
            "p": self.p, "p_adjusted": self.p_adjusted, "verdict": self.verdict,
        }  # fmt: skip


@dataclass(frozen=True)
class BenchDiff:
    """Two bench runs of one kind, figure by figure."""

    old_id: str
    new_id: str
    kind: str
    changes: tuple[BenchChange, ...]
    only_in_old: tuple[str, ...] = ()
    only_in_new: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.old_id, "b": self.new_id, "kind": self.kind, "rule": BENCH_RULE,
            "changes": [c.to_dict() for c in self.changes],
            "only_in_a": list(self.only_in_old), "only_in_b": list(self.only_in_new),
        }  # fmt: skip


def _change(label: str, old: BenchFigure, new: BenchFigure) -> BenchChange:
    """The change of one figure, its p unadjusted and its verdict not yet judged."""
    return BenchChange(
        label, new.better, old.ratio, old.ratio_ci, new.ratio, new.ratio_ci,
        log_ratio_change_interval(new.round_ratios, old.round_ratios),
        welch_log_p(new.round_ratios, old.round_ratios),
    )  # fmt: skip


def _judged(change: BenchChange, p_adjusted: float | None) -> BenchChange:
    if p_adjusted is None or change.change is None:
        return change
    moved = p_adjusted < ALPHA and change.change.excludes(1.0)
    rose = change.change.value > 1.0
    word = ("better" if rose == (change.better == "higher") else "worse") if moved else None
    return BenchChange(
        change.label, change.better, change.old, change.old_ci, change.new, change.new_ci,
        change.change, change.p, p_adjusted, word or "no significant change",
    )  # fmt: skip


def diff_benches(old: BenchRun, new: BenchRun) -> BenchDiff:
    """Run B's figures against run A's (ValueError when the two are of different kinds)."""
    if old.kind != new.kind:
        raise ValueError(
            f"{old.run_id} is a bench {old.kind} and {new.run_id} a bench {new.kind}: "
            "diff two benches of one kind"
        )
    old_cases = {c.key: c for c in old.cases}
    new_cases = {c.key: c for c in new.cases}
    changes = []
    for key, case in old_cases.items():
        if key not in new_cases:
            continue
        for figure in case.figures:
            other = new_cases[key].figure(figure.name)
            if other is not None:
                changes.append(_change(f"{case.label} {figure.name}", figure, other))
    adjusted = holm_adjusted([c.p for c in changes])
    return BenchDiff(
        old.run_id,
        new.run_id,
        old.kind,
        tuple(_judged(c, p) for c, p in zip(changes, adjusted, strict=True)),
        tuple(c.label for k, c in old_cases.items() if k not in new_cases),
        tuple(c.label for k, c in new_cases.items() if k not in old_cases),
    )


CHANGE_TONES: dict[str, Tone] = {"better": "ok", "worse": "failed"}


def _ratio_cell(value: float | None, pair: Any, style: Style) -> Cell:
    return figure_cell(value, pair, style, spec="{:.2f}", suffix="×")


def _change_cell(change: BenchChange, style: Style) -> Cell:
    interval = change.change.as_pair() if change.change is not None else None
    return _ratio_cell(change.ratio_change, interval, style)


def _column(header: str, cell: Any, numeric: bool = True) -> Column[BenchChange]:
    return Column(header, value=lambda change: change, format=cell, numeric=numeric)


def bench_diff_table(result: BenchDiff) -> TableSpec[BenchChange]:
    """The bench diff's table over its figures (charts.columns): each ratio ours / minimal
    in A and in B, the change B/A with its interval, the adjusted p and the verdict."""
    return TableSpec(
        title=f"bench {result.kind} diff: A {result.old_id} → B {result.new_id}",
        columns=(
            _column("case", lambda c, _: c.label, numeric=False),
            _column("A ours / minimal", lambda c, style: _ratio_cell(c.old, c.old_ci, style)),
            _column("B ours / minimal", lambda c, style: _ratio_cell(c.new, c.new_ci, style)),
            _column("change B/A [95 %]", _change_cell),
            _column("p (Holm)", lambda c, _: figure_text(c.p_adjusted, spec="{:.3f}")),
            _column(
                "verdict",
                lambda c, _: Cell(c.verdict, tone=CHANGE_TONES.get(c.verdict)),
                numeric=False,
            ),
        ),
    )

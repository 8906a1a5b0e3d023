"""The h2-attacks table: per server and attack, the goodput its well-behaved clients kept
while one connection attacked it (model.attacks.AttackRetention, from the case's
summary), defined once as columns (charts.columns) for the console, the Markdown and
report.html."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell, figure_text
from model.attacks import AttackRetention
from model.results import Case

# retained goodput at or above this is `ok`, below RETAINED_FAILED `failed`, between `warn`
RETAINED_OK = 0.9
RETAINED_FAILED = 0.5


@dataclass(frozen=True)
class AttackRow:
    """One attack against one server's case."""

    case: Case
    retention: AttackRetention


def attack_rows(cases: Sequence[Case]) -> list[AttackRow]:
    """Every attack of every case that measured some, in the run's order."""
    return [AttackRow(case, r) for case in cases for r in case.summary.attack_retention]


def _retained(row: AttackRow, style: Style) -> Cell:
    """The retained share with its interval, toned by how much was lost."""
    r = row.retention
    cell = figure_cell(r.retained, r.retained_ci, style, spec="{:.3f}", suffix="×")
    tone: Tone | None = None
    if r.retained is not None:
        upper = r.retained_ci[1] if r.retained_ci is not None else r.retained
        tone = "ok" if upper >= RETAINED_OK else "failed" if upper < RETAINED_FAILED else "warn"
    return Cell(cell.text, cell.interval, tone)


def _figure(
    header: str, value: Callable[[AttackRow], float | None], spec: str = "{:,.0f}", suffix: str = ""
) -> Column[AttackRow]:
    """A numeric column of one figure (`–` without it)."""
    return Column(
        header,
        value=value,
        format=lambda v, _style: figure_text(v, spec=spec, suffix=suffix),
        numeric=True,
    )


ATTACKS = TableSpec[AttackRow](
    title="h2 attacks: the well-behaved clients' goodput with one attacking connection",
    columns=(
        Column("server", value=lambda r: r.case.framework),
        Column(
            "protocol",
            value=lambda r: r.case.protocol,
            shown=lambda rows: len({r.case.protocol for r in rows}) > 1,
        ),
        Column("attack", value=lambda r: r.retention.attack),
        Column("pairs", value=lambda r: r.retention.pairs, numeric=True),
        _figure("without req/s", lambda r: r.retention.goodput_without_per_s),
        _figure("with req/s", lambda r: r.retention.goodput_with_per_s),
        Column("retained [95 %]", value=lambda r: r, format=_retained, numeric=True),
        _figure("p99 without ms", lambda r: r.retention.p99_without_ms, "{:,.2f}"),
        _figure("p99 with ms", lambda r: r.retention.p99_with_ms, "{:,.2f}"),
        _figure("p99 with/without", lambda r: r.retention.p99_ratio, "{:.2f}", "×"),
        Column("attacker's connection", value=lambda r: r.retention.endings, wraps=True),
    ),
)

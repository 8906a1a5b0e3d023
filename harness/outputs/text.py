"""What the text outputs share beyond the run's tables (charts.tables): a case's label
and the diff's table, defined once as columns (charts.columns) for the console
(`harness diff`), the Markdown output and the published diff page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell, figure_text
from model.results import Case

if TYPE_CHECKING:  # harness.diff (the statistics): loaded only when a diff is asked for
    from harness.diff import CaseDiff, Change, RunDiff


def case_label(case: Case) -> str:
    """The case as a person names it: the framework, and what else makes it this case
    (`aiohttp [text, empty, wrk, single, both]`)."""
    return f"{case.framework} [{', '.join(case.identity[1:])}]"


def change_text(change: Change | None, style: Style = "bracketed") -> Cell:
    """A diff's ratio B/A with its bootstrap interval: `0.912× [0.880, 0.944]` in files,
    `0.912× ±4 %` in the terminal; `–` without a ratio."""
    if change is None:
        return Cell("–")
    pair = change.interval.as_pair() if change.interval is not None else None
    return figure_cell(change.ratio, pair, style, spec="{:.3f}", suffix="×")


def _lower_is_better(change: Change | None, style: Style) -> Cell:
    """A ratio where lower is better, with `lower`/`higher` (or `no significant change`)
    when the rounds judged it."""
    from harness.diff import lower_or_higher

    cell = change_text(change, style)
    if change is None or change.ratio is None:
        return cell
    said = lower_or_higher(change)
    # the words with the figure, so the report sets the interval alone beneath them
    return cell if said == "no rounds" else Cell(f"{cell.text} {said}", cell.interval)


VERDICT_TONES: dict[str, Tone] = {"faster": "ok", "slower": "failed", "not comparable": "warn"}


def diff_table(result: RunDiff) -> TableSpec[CaseDiff]:
    """The diff's table over its cases: each peak in A and B, the ratio B/A with its
    interval, the adjusted p and the verdict; the p99's change beside (lower is better,
    for information) and the server's CPU per reply when either run measured it."""

    def verdict(case: CaseDiff, style: Style) -> Cell:
        words = case.verdict + (f", beyond {result.factor:g}×" if case.beyond_factor else "")
        return Cell(words, tone=VERDICT_TONES.get(case.verdict))

    def column(header: str, cell: Any, numeric: bool = True, shown: Any = None) -> Column:
        return Column(
            header,
            value=lambda case: case,
            format=cell,
            numeric=numeric,
            shown=shown or (lambda cases: True),
        )

    return TableSpec(
        title=f"diff: A {result.old_id} → B {result.new_id} (factor {result.factor:g})",
        columns=(
            column("case", lambda c, _: c.label, numeric=False),
            column("A peak", lambda c, _: figure_text(c.peak.old)),
            column("B peak", lambda c, _: figure_text(c.peak.new)),
            column("B/A [95 %]", lambda c, style: change_text(c.peak, style)),
            column("p (Holm)", lambda c, _: figure_text(c.peak.p_verdict, spec="{:.3f}")),
            column("verdict", verdict, numeric=False),
            column("A p99 ms", lambda c, _: figure_text(c.p99.old, spec="{:,.2f}")),
            column("B p99 ms", lambda c, _: figure_text(c.p99.new, spec="{:,.2f}")),
            column("p99 B/A [95 %]", lambda c, style: _lower_is_better(c.p99, style)),
            column(
                "CPU µs/req B/A",
                lambda c, style: _lower_is_better(c.cpu_us_per_req, style),
                shown=lambda cases: any(
                    c.cpu_us_per_req is not None and c.cpu_us_per_req.ratio for c in cases
                ),
            ),
            Column(
                "note",
                value=lambda c: c.note or "",
                # the terminal prints each note whole beneath the table (note_lines)
                format=lambda note, style: "(below)" if note and style == "compact" else note,
                wraps=True,
            ),
        ),
    )


def note_lines(result: RunDiff) -> list[str]:
    """Each case's note as a whole line, `label: note` (the terminal's table says `(below)`)."""
    return [f"{case.label}: {case.note}" for case in result.cases if case.note]

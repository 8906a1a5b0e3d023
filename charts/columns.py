"""The table model every output renders: a table is one list of columns over rows of the
result model (a run's cases, a diff's cases, a bench's rounds), each column a header, a
rule for when it is shown, a value read from a row and a formatter.

The console (harness.outputs.console), report.html (charts.report), the Markdown and the
JUnit outputs (harness.outputs) render the same columns, so their tables cannot drift.
Each renders the cells in one of two styles: `compact` for the terminal (an interval as
`12,304 ±3 %`, a row on one line) and `bracketed` for files (`12,304 [11,912, 12,695]`).

No harness here (charts draw the model only): anything with rows can have a table —

    ROUNDS = TableSpec[BenchRound](
        title="bench",
        columns=(
            Column("app", value=lambda r: r.app),
            Column(
                "peak",
                value=lambda r: (r.peak, r.peak_ci),
                format=lambda v, style: figure_cell(v[0], v[1], style),
                unit=lambda r: "req/s",
                numeric=True,
            ),
        ),
    )

and `ROUNDS.render(rounds, "compact")` drawn by harness.outputs.console.rich_table,
`ROUNDS.render(rounds, "bracketed")` by charts.report.html_table or
harness.outputs.markdown.rendered_table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from model.figures import figure

Style = Literal["compact", "bracketed"]
STYLES: tuple[Style, ...] = ("compact", "bracketed")
# how a cell reads beyond its words: the console colours it, the report gives it a CSS
# class, the Markdown makes it bold
Tone = Literal["ok", "warn", "failed"]

Row = TypeVar("Row")


def figure_text(
    value: float | None,
    interval: Sequence[float] | None = None,
    style: Style = "bracketed",
    *,
    spec: str | None = None,
    suffix: str = "",
) -> str:
    """A figure with its 95 % interval, the one way every output writes it.

    `bracketed`: `12,304 [11,912, 12,695]`; `compact`: `12,304 ±3 %` (the interval's
    half-width as a percentage of the figure). `spec` formats the numbers (default
    model.figures.figure: 25,752; 3.72; 0.153), `suffix` follows the figure (`×`, ` req/s`).
    `–` without a figure; the figure alone without an interval.
    """
    if value is None:
        return "–"
    text = (figure(value) if spec is None else spec.format(value)) + suffix
    if interval is None:
        return text
    low, high = interval
    if style == "compact":
        return f"{text} {half_width_text(value, low, high)}"
    bounds = [figure(v) if spec is None else spec.format(v) for v in (low, high)]
    return f"{text} [{bounds[0]}, {bounds[1]}]"


def half_width_text(value: float, low: float, high: float) -> str:
    """An interval as `±3 %` of `value` (`±0.4 %` under one per cent); `±?` for a zero
    figure, which no percentage describes."""
    if value == 0:
        return "±?"
    pct = abs(high - low) / 2 / abs(value) * 100
    return f"±{pct:.1f} %" if pct < 1 else f"±{pct:.0f} %"


def interval_text(pair: Sequence[float] | None, spec: str | None = None) -> str:
    """A 95 % interval alone, `[low, high]`; `–` without one."""
    if pair is None:
        return "–"
    low, high = (figure(v) if spec is None else spec.format(v) for v in pair)
    return f"[{low}, {high}]"


@dataclass(frozen=True)
class Cell:
    """A rendered cell: its text, the interval written apart (the report sets it beneath
    the figure; the other outputs join it after), its tone, and where it links to (a URL,
    absolute or relative to the page: the report and the Markdown make the text a link,
    the console prints the text)."""

    text: str
    interval: str = ""
    tone: Tone | None = None
    link: str = ""

    @property
    def joined(self) -> str:
        """The text and its interval on one line."""
        return f"{self.text} {self.interval}" if self.interval else self.text


def figure_cell(
    value: float | None,
    interval: Sequence[float] | None,
    style: Style,
    *,
    spec: str | None = None,
    suffix: str = "",
) -> Cell:
    """figure_text as a Cell, the interval apart (for the report to set beneath)."""
    whole = figure_text(value, interval, style, spec=spec, suffix=suffix)
    alone = figure_text(value, None, style, spec=spec, suffix=suffix)
    return Cell(alone, whole[len(alone) :].strip())


def _always(rows: Sequence[Any]) -> bool:
    return True


def _as_text(value: Any, style: Style) -> Cell | str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column: `header`, `shown` (whether a table of these rows has it), `value` (a
    row's datum) and `format` (that datum as a cell, in a style). `numeric`: aligned
    right. `wraps`: free text the terminal may cut to keep a row on one line (the whole
    text is printed beneath the table)."""

    header: str
    value: Callable[[Row], Any]
    format: Callable[[Any, Style], Cell | str] = _as_text
    shown: Callable[[Sequence[Row]], bool] = _always
    numeric: bool = False
    wraps: bool = False
    # the unit of a row's figure (None: the row has none): said once in the header when
    # every row's is the same (`peak req/s`), else after each figure (`12,304 req/s`)
    unit: Callable[[Row], str | None] | None = None

    def cell(self, row: Row, style: Style, unit: str | None = None) -> Cell:
        """This column's cell for `row`, `unit` after its figure."""
        made = self.format(self.value(row), style)
        cell = made if isinstance(made, Cell) else Cell(made)
        if unit and cell.text != "–":
            return Cell(f"{cell.text} {unit}", cell.interval, cell.tone, cell.link)
        return cell


@dataclass(frozen=True)
class TableSpec(Generic[Row]):
    """A table: a title and its columns over rows of one kind. `rows` (optional) picks
    and orders the rows the table has out of the ones given (a run's measured cases)."""

    title: str
    columns: tuple[Column[Row], ...]
    rows: Callable[[Sequence[Row]], Sequence[Row]] = field(default=lambda rows: rows)

    def render(self, rows: Sequence[Row], style: Style) -> RenderedTable:
        """The shown columns' headers and each row's cells; a table with no rows has none."""
        chosen = list(self.rows(rows))
        shown = [c for c in self.columns if chosen and c.shown(chosen)]
        headers, cells = [], []
        for column in shown:
            units = {column.unit(row) for row in chosen} - {None} if column.unit else set()
            shared = units.pop() if len(units) == 1 else None
            headers.append(f"{column.header} {shared}" if shared else column.header)
            cells.append(
                [
                    column.cell(row, style, None if shared or not column.unit else column.unit(row))
                    for row in chosen
                ]
            )
        return RenderedTable(
            title=self.title,
            headers=tuple(headers),
            numeric=tuple(c.numeric for c in shown),
            wraps=tuple(c.wraps for c in shown),
            cells=tuple(zip(*cells, strict=True)) if cells else (),
        )


@dataclass(frozen=True)
class RenderedTable:
    """A table's cells in one style, ready for an output to draw."""

    title: str
    headers: tuple[str, ...]
    numeric: tuple[bool, ...]
    wraps: tuple[bool, ...]
    cells: tuple[tuple[Cell, ...], ...]

    def __bool__(self) -> bool:
        return bool(self.cells)

    def text_rows(self) -> list[list[str]]:
        """Each row's cells as one-line text (the interval joined)."""
        return [[cell.joined for cell in row] for row in self.cells]

    def numeric_indexes(self) -> set[int]:
        """The indexes of the columns aligned right."""
        return {i for i, numeric in enumerate(self.numeric) if numeric}

"""The terminal's tables: the run's tables (charts.tables) drawn with rich in the compact
style, one line per row, and the verdict in words.

A row stays on one line at any width a log has (120 columns): figures never wrap; free
text (flags, a failure's reason) is cut with `…` where the row would be too wide, and the
whole text is printed beneath the table (`failure_lines`, `deviation_lines`). A header
longer than its column's cells wraps at its spaces instead.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from charts.attack_tables import ATTACKS, attack_rows
from charts.columns import Cell, RenderedTable, figure_text, interval_text
from charts.cpu_tables import CPU_SPLIT, PROFILED_CAPTION, profiled, top_frames_spec
from charts.tables import (
    CLOSING,
    HELD,
    MEMORY,
    PRECISION,
    SUMMARY,
    TLS,
    VERDICT_TITLE,
    run_status_line,
    verdict_lines,
)
from model.results import FLAG_MEANINGS, Run

TONE_STYLES = {"ok": "green", "warn": "yellow", "failed": "red"}


def _header(header: str, cells: list[Cell]) -> Text:
    """The header, its words on lines of their own where it is wider than its cells (so
    the header does not widen the row)."""
    widest = max((len(cell.joined) for cell in cells), default=0)
    if len(header) <= widest:
        return Text(header)
    lines: list[str] = []
    for word in header.split():
        if lines and len(lines[-1]) + 1 + len(word) <= widest:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return Text("\n".join(lines))


def _natural_width(rendered: RenderedTable) -> int:
    """The table's width with every header on one line (one space between columns)."""
    widths = [
        max([len(header), *(len(row[index].joined) for row in rendered.cells)])
        for index, header in enumerate(rendered.headers)
    ]
    return sum(widths) + len(widths) - 1


def rich_table(
    rendered: RenderedTable, title: str | None = None, caption: str = "", width: int = 120
) -> Table:
    """A rendered table (charts.columns) as a rich Table, each row one line; headers wider
    than their cells wrap at their spaces when the table would not fit `width`."""
    wrap_headers = _natural_width(rendered) > width
    table = Table(
        title=title if title is not None else rendered.title,
        caption=caption or None,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 0),  # the box divides the columns: one space, a log line kept short
        title_justify="left",
        caption_justify="left",
    )
    for index, header in enumerate(rendered.headers):
        cells = [row[index] for row in rendered.cells]
        table.add_column(
            _header(header, cells) if wrap_headers else Text(header),
            justify="right" if rendered.numeric[index] else "left",
            # free text gives way when the row is too wide: the column narrows (rich
            # collapses only wrapping columns) and its cells, which never wrap, are cut
            no_wrap=not rendered.wraps[index],
            min_width=len(header) if rendered.wraps[index] else None,
        )
    for row in rendered.cells:
        table.add_row(
            *(
                Text(
                    cell.joined,
                    style=TONE_STYLES.get(cell.tone or "", ""),
                    no_wrap=True,
                    overflow="ellipsis",
                )
                for cell in row
            )
        )
    return table


def summary_table(run: Run, width: int = 120) -> Table:
    """The run's summary (charts.tables.SUMMARY), titled with its id and status, to fit
    `width` columns."""
    rendered = SUMMARY.render(run.cases, "compact")
    baseline = any(c.summary.role == "baseline" for c in run.cases)
    return rich_table(
        rendered,
        title=f"run {run.run_id}: {run_status_line(run)}",
        caption="* baseline" if baseline else "",
        width=width,
    )


def precision_table(run: Run, width: int = 120) -> Table | None:
    """Each case measured in rounds (charts.tables.PRECISION), the rounds kept out and
    why as its caption; None when no case ran rounds."""
    rendered = PRECISION.render(run.cases, "compact")
    if not rendered:
        return None
    measured = [c for c in run.cases if c.status == "ok" and c.summary.rounds]
    asked = {c.summary.precision_pct for c in measured} - {None}
    title = "precision" + (
        f": ±{', '.join(f'{p:g}' for p in sorted(asked))} % asked" if asked else ""
    )
    excluded = [
        f"{case.framework} round {e['round'] + 1}: {e['reason']}"
        for case in measured
        for e in case.summary.rounds_excluded
    ]
    caption = "kept out — " + "; ".join(excluded) if excluded else ""
    return rich_table(rendered, title=title, caption=caption, width=width)


def case_table(spec: Any, run: Run, width: int = 120) -> Table | None:
    """One of the run's other tables (charts.tables: TLS, MEMORY, CLOSING, HELD); None when it
    has no rows."""
    rendered = spec.render(run.cases, "compact")
    return rich_table(rendered, width=width) if rendered else None


def attacks_table(run: Run, width: int = 120) -> Table | None:
    """The h2-attacks table (charts.attack_tables.ATTACKS); None when no case measured one."""
    rendered = ATTACKS.render(attack_rows(run.cases), "compact")
    return rich_table(rendered, width=width) if rendered else None


def precision_line(run: Run) -> str | None:
    """One line on a run to a precision: how many cases reached it, and each that did not
    with its width and the source of its noise; None when no precision was asked."""
    asked = [c for c in run.cases if c.status == "ok" and c.summary.precision_pct is not None]
    if not asked:
        return None
    short = [c for c in asked if c.summary.imprecise_reason is not None]
    within = len(asked) - len(short)
    line = f"precision: {within} of {len(asked)} cases within the ±% asked"
    if short:
        line += "; imprecise: " + "; ".join(
            f"{c.framework} {c.summary.imprecise_reason}, noise from the {c.summary.noise_source}"
            for c in short
        )
    return line


def topology_table(run: Run) -> Table | None:
    """The process-model study's table when a run compares process models: req/s, time
    per request, percentiles, and real failures apart from ab's Length artefacts (None
    otherwise)."""
    if len({c.process_model for c in run.cases}) < 2:
        return None
    table = Table(title="process models (the process-model study)")
    columns = ("framework", "process model", "req/s", "mean ms", "p50 ms", "p90 ms",
               "p99 ms", "max ms", "failed", "length artefacts")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:2] else "right")
    for case in run.cases:
        best = max(case.steps, key=lambda s: s.achieved, default=None)
        if case.status != "ok" or best is None:
            table.add_row(case.framework, case.process_model, case.status, *[""] * 6,
                          escape(case.error or ""))  # fmt: skip
            continue
        latency = best.latency_ms
        table.add_row(
            case.framework,
            case.process_model,
            figure_text(best.achieved, spec="{:,.0f}"),
            *(figure_text(latency.get(k), spec="{:.1f}") for k in ("avg", "p50", "p90", "p99")),
            figure_text(latency.get("max"), spec="{:.1f}"),
            str(best.errors.get("total", 0)),
            str(best.figures.length_mismatches or 0),
        )
    return table


def threshold_table(run: Run) -> Table | None:
    """Each threshold rule against each case it named: the figure, its interval, what was
    compared (the interval's low or high end, or the value) and whether it held; None when
    the run had no rules."""
    if not run.thresholds:
        return None
    failed = sum(not t.held for t in run.thresholds)
    table = Table(title=f"thresholds: {len(run.thresholds) - failed} held, {failed} failed")
    for column in ("rule", "case", "value", "interval", "judged on", "result"):
        table.add_column(column, justify="right" if column in ("value", "interval") else "left")
    for result in run.thresholds:
        table.add_row(
            escape(result.rule),  # `aiohttp[h1-tls]: …` is a rule, not rich markup
            result.case,
            figure_text(result.value),
            interval_text(result.interval),
            result.judged_on,
            "[green]held[/]" if result.held else "[red]FAILED[/]",
        )
    return table


def failure_lines(run: Run) -> list[str]:
    """Each failed case's error as a whole line (the table cuts it to keep one line)."""
    return [f"{c.framework}: {c.error}" for c in run.cases if c.status == "failed"]


def deviation_lines(run: Run) -> list[str]:
    """Each case's undeclared deviations as whole lines, `framework: check key: sent …;
    expected …; came …; remedy` (harness.verify.severity), once per framework and key."""
    from harness.verify.severity import deviation_from_dict

    lines = []
    for case in run.cases:
        if case.status != "ok":  # measured only: a failed case says why in its error
            continue
        for deviation in case.deviations:
            if deviation.get("declared") is None:
                line = deviation_from_dict(deviation).line(case.framework)
                lines.append(f"{case.framework}: {line}")
    return list(dict.fromkeys(lines))


def flag_lines(run: Run) -> list[str]:
    """Each flag the run's cases raised, once: the cases that raised it and what it means
    (the table may cut a long list of flags to keep a row on one line)."""
    raised: dict[str, list[str]] = {}
    for case in run.cases:
        for flag in case.summary.flags:
            raised.setdefault(flag, []).append(case.framework)
    return [
        f"{flag} ({', '.join(dict.fromkeys(names))}): {FLAG_MEANINGS.get(flag, '')}".rstrip(": ")
        for flag, names in raised.items()
    ]


def print_summary(console: Console, run: Run) -> None:
    """The summary table, then what its cells cut: the flags with their meaning, each
    deviation and each failure whole."""
    console.print(summary_table(run, console.width))
    for line in flag_lines(run):
        console.print(f"[dim]flag[/] {escape(line)}", soft_wrap=True)
    for line in deviation_lines(run):
        console.print(f"[yellow]warning:[/] {escape(line)}", soft_wrap=True)
    for line in failure_lines(run):
        console.print(f"[red]failed:[/] {escape(line)}", soft_wrap=True)


def print_run_tables(console: Console, run: Run) -> None:
    """Every table the run has, as compare prints them after a run: the summary, the
    precision, the process models, the protocols, the close storm, the connections and
    the thresholds (each when the run has it)."""
    print_summary(console, run)
    print_cpu_profile(console, run)
    precision = precision_table(run, console.width)
    if precision is not None:
        console.print(precision)
        line = precision_line(run)
        if line is not None:
            console.print(line)
    for note in dict.fromkeys(c.summary.limit_note for c in run.cases if c.summary.limit_note):
        console.print(f"[yellow]note:[/] {escape(note)}")
    for table in (
        topology_table(run),
        case_table(TLS, run, console.width),
        case_table(CLOSING, run, console.width),
        case_table(MEMORY, run, console.width),
        case_table(HELD, run, console.width),
        attacks_table(run, console.width),
        threshold_table(run),
    ):
        if table is not None:
            console.print(table)


def print_cpu_profile(console: Console, run: Run, frames: int = 5) -> None:
    """--cpu-profile's split table (charts.cpu_tables), its caption, and each case's top
    frames; nothing when no case was profiled."""
    rendered = CPU_SPLIT.render(run.cases, "compact")
    if not rendered:
        return
    console.print(rich_table(rendered, width=console.width))
    console.print(f"[dim]{escape(PROFILED_CAPTION)}[/]", soft_wrap=True)
    for case in profiled(run.cases):
        top = (case.summary.cpu_profile or {}).get("top_frames") or []
        if top:
            spec = top_frames_spec(case, frames)
            console.print(rich_table(spec.render(top, "compact"), width=console.width))


def print_verdict(console: Console, run: Run) -> None:
    """The verdict in words (charts.tables.verdict_lines), the report's sentence: one
    line per comparable set, then its neighbour ratios; nothing for a run without one."""
    lines = verdict_lines(run.verdict)
    if not lines:
        return
    console.print(f"[bold]{VERDICT_TITLE}:[/]")
    for line in lines:
        console.print(f"  {escape(line.head)}", soft_wrap=True)
        if line.ratios:
            console.print(f"    {escape('; '.join(line.ratios))}", soft_wrap=True, style="dim")

"""The bench's tables, defined once as columns (charts.columns) over the cases a bench
keeps (model.bench): `harness bench http`'s and `harness bench ws`'s terminal tables
render these. No harness here (charts draw the model only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell, figure_text
from model.bench import BenchCase, BenchFigure
from servers.contract import PROTOCOL_H1

VERDICT_TONES: dict[str, Tone] = {"within": "ok", "outside": "failed", "undecided": "warn"}
WS_FIGURES = {"memory": "KB/conn", "rss": "RSS KB/conn", "cpu": "CPU µs/conn"}


def verdict_cell(figure: BenchFigure | None) -> Cell:
    """`≥ 0.95×` (within), `not ≤ 1.25×` (outside) or `undecided`, toned."""
    if figure is None:
        return Cell("–")
    words = {"within": figure.limit_text, "outside": f"not {figure.limit_text}"}
    return Cell(words.get(figure.verdict, "undecided"), tone=VERDICT_TONES.get(figure.verdict))


def ratio_cell(figure: BenchFigure | None, style: Style) -> Cell:
    """ours / minimal with its 95 % interval: `0.97× ±2 %`, `0.97× [0.95, 0.99]` in files."""
    if figure is None:
        return Cell("–")
    return figure_cell(figure.ratio, figure.ratio_ci, style, spec="{:.2f}", suffix="×")


def _of(name: str) -> Callable[[BenchCase], BenchFigure | None]:
    return lambda case: case.figure(name)


def _both(spec: str) -> Callable[[BenchFigure | None, Style], str]:
    """ours · minimal, each the mean of its rounds."""

    def cell(figure: BenchFigure | None, style: Style) -> str:
        if figure is None:
            return "–"
        return (
            f"{figure_text(figure.ours_mean, spec=spec)} · "
            f"{figure_text(figure.minimal_mean, spec=spec)}"
        )

    return cell


def _column(header: str, read: Any, format: Any, *, numeric: bool = True) -> Column[BenchCase]:
    return Column(header, value=read, format=format, numeric=numeric)


def _precision(case: BenchCase, style: Style) -> Cell:
    asked, short = case.details.get("precision_pct"), case.details.get("imprecise_reason")
    if not asked:
        return Cell("–")
    if short:
        return Cell(f"imprecise: {short}", tone="warn")
    return Cell(f"within ±{asked:g} %", tone="ok")


FRAMEWORK = _column("framework", lambda c: c.framework, lambda v, s: v, numeric=False)
LOOP = _column("loop", lambda c: c.loop or "", lambda v, s: v, numeric=False)
ROUNDS = _column("rounds", lambda c: c.rounds, lambda v, s: str(v))

BENCH_HTTP = TableSpec[BenchCase](
    title="bench http: GET / on ours and the minimal app",
    columns=(
        FRAMEWORK,
        LOOP,
        Column(
            "protocol",
            value=lambda c: c.protocol,
            shown=lambda cases: any(c.protocol != PROTOCOL_H1 for c in cases),
        ),
        _column("req/s ours · minimal", _of("req/s"), _both("{:,.0f}")),
        _column("ours / minimal", _of("req/s"), ratio_cell),
        _column("verdict", _of("req/s"), lambda f, s: verdict_cell(f), numeric=False),
        ROUNDS,
        _column("precision", lambda c: c, _precision, numeric=False),
    ),
)

BENCH_WS = TableSpec[BenchCase](
    title="bench ws: idle WebSocket connections on ours and the minimal server",
    columns=(
        FRAMEWORK,
        LOOP,
        _column("conns", lambda c: c.details.get("connections"), lambda v, s: figure_text(v)),
        _column("workers", lambda c: c.details.get("server_processes"), lambda v, s: str(v)),
        _column("KB/conn ours · minimal", _of(WS_FIGURES["memory"]), _both("{:.1f}")),
        _column("ours / minimal", _of(WS_FIGURES["memory"]), ratio_cell),
        _column("memory", _of(WS_FIGURES["memory"]), lambda f, s: verdict_cell(f), numeric=False),
        _column("RSS KB/conn ours · minimal", _of(WS_FIGURES["rss"]), _both("{:.1f}")),
        _column("CPU µs/conn ours · minimal", _of(WS_FIGURES["cpu"]), _both("{:,.0f}")),
        _column("ours / minimal ", _of(WS_FIGURES["cpu"]), ratio_cell),
        _column("CPU", _of(WS_FIGURES["cpu"]), lambda f, s: verdict_cell(f), numeric=False),
        ROUNDS,
    ),
)

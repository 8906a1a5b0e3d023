"""Figures as the outputs write them: one place, so JUnit, Markdown and the site agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from model.figures import figure
from model.results import Case
from model.scenarios import SCENARIOS
from servers import contract

if TYPE_CHECKING:
    from harness.stats import Interval


def interval(pair: tuple[float, float] | None) -> str:
    """ "[low, high]" for a 95 % interval; "" when there is none."""
    return "" if pair is None else f"[{figure(pair[0])}, {figure(pair[1])}]"


def with_interval(value: float | None, pair: tuple[float, float] | None) -> str:
    """`25,752 [24,100, 27,000]`, or the figure alone without an interval."""
    text = figure(value)
    return f"{text} {interval(pair)}" if pair is not None and value is not None else text


def case_label(case: Case) -> str:
    """The case as a person names it: the framework, and what else makes it this case
    (`aiohttp [text, empty, wrk, single, both]`)."""
    return f"{case.framework} [{', '.join(case.identity[1:])}]"


def peak_text(case: Case) -> str:
    """The case's peak with its unit and interval: `25,752 req/s [24,100, 27,000]`."""
    summary = case.summary
    if summary.peak is None:
        return "–"
    text = f"{figure(summary.peak)} {summary.peak_unit}"
    return text + (f" {interval(summary.peak_ci)}" if summary.peak_ci else "")


def ratio_text(ratio: float | None, pair: Interval | None) -> str:
    """`0.912× [0.880, 0.944]`: a diff's ratio B/A with its bootstrap interval."""
    if ratio is None:
        return "–"
    text = f"{ratio:.3f}×"
    if pair is not None:
        text += f" [{pair.low:.3f}, {pair.high:.3f}]"
    return text


CLOSING_HEADERS = (
    "server",
    "close",
    "connections",
    "tick max ms",
    "tick avg ms",
    "closed in s",
    "open after",
    "GC ms (collections)",
)


def closing_rows(cases: list[Case]) -> list[list[str]]:
    """The close-storm table's rows (CLOSING_HEADERS): each connection case's closing step
    (`summary.closing`) — how its connections were closed, how many, the server's worst
    and mean tick while it closed them, how long that took and what it still held after,
    and its collector's pauses in the step. Empty when no case has one."""
    rows = []
    for case in cases:
        closing = case.summary.closing
        if closing is None:
            continue
        name = case.framework + (" (baseline)" if case.summary.role == "baseline" else "")
        rows.append(
            [
                name,
                str(closing["close"]),
                figure(closing.get("connections")),
                figure(closing.get("tick_max_ms")),
                figure(closing.get("tick_avg_ms")),
                figure(closing.get("close_s")),
                figure(closing.get("open_after")),
                f"{figure(closing.get('gc_pause_ms'))} ({closing.get('gc_collections', 0)})",
            ]
        )
    return rows


HELD_HEADERS = ("server", "held in flight", "p99 ms", "p99 limit ms", "req/s there")


def held_rows(cases: list[Case]) -> list[list[str]]:
    """The delay table's rows (HELD_HEADERS): each delay case's requests held in flight at
    p99 ≤ 2 × the delay (`summary.held_in_flight`; `none held` when no step did). Empty
    when no case measured the delay scenario."""
    rows = []
    for case in cases:
        scenario = SCENARIOS.get(case.scenario)
        if scenario is None or scenario.route != contract.ROUTE_DELAY_PREFIX:
            continue
        if case.status != "ok":  # skipped or failed: the summary table says why
            continue
        held = case.summary.held_in_flight or {}
        name = case.framework + (" (baseline)" if case.summary.role == "baseline" else "")
        rows.append(
            [
                name,
                figure(held.get("concurrency")) if held else "none held",
                figure(held.get("p99_ms")),
                figure(held.get("limit_ms")),
                figure(held.get("req_s")),
            ]
        )
    return rows

"""The published site's bench page (`bench.html`, harness.publish writes it): the bench
runs grouped by kind (http, ws) and host, newest first, each framework's ratio ours /
minimal with its 95 % interval and verdict, and its change from the run before with that
change's interval (harness.bench_diff), as `harness diff` of the two prints it.

The groups, the tables' cells and the page's body (HTML, escaped here) are pure
functions of HistoryEntry; `draw_bench_trends` draws the charts; harness.publish wraps
the body in the site's page and table.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from harness.bench_diff import BENCH_RULE, BenchChange, BenchDiff, diff_benches
from harness.history import (
    HistoryEntry,
    bench_limits,
    bench_trend_series,
    host_key,
    ratio_text,
    steps_beyond_noise,
)
from model.bench import BenchFigure, BenchRun

BENCH_PAGE = "bench.html"
VERDICT_CSS = {"within": "ok", "outside": "failed", "undecided": "incomplete"}
CHANGE_CSS = {"better": "ok", "worse": "failed"}
KIND_MEASURES = {
    "http": "GET / req/s (wrk), ours / minimal: at least 0.95×.",
    "ws": "Idle WebSocket connections: KB and CPU µs per connection, ours / minimal: at most "
    "1.25×.",
}


@dataclass(frozen=True)
class BenchSeries:
    """The bench runs of one kind on one host, oldest first, and the diffs between neighbours."""

    kind: str
    host: str
    runs: tuple[BenchRun, ...]
    diffs: tuple[BenchDiff, ...]

    @property
    def anchor(self) -> str:
        return "bench-" + "-".join(re.findall(r"[A-Za-z0-9]+", f"{self.kind} {self.host}"))

    @property
    def title(self) -> str:
        return f"bench {self.kind} on {self.host}"

    @property
    def measures(self) -> str:
        """What the group's figures are, and the bench's limit."""
        return KIND_MEASURES[self.kind]


def bench_series(entries: Sequence[HistoryEntry], host_label: Any) -> list[BenchSeries]:
    """The readable bench runs grouped by kind and host (the facts `harness diff` checks),
    each group oldest first; `host_label(run)` names a host as the site does."""
    groups: dict[tuple[str, tuple[Any, ...]], list[BenchRun]] = {}
    for entry in entries:
        if entry.bench is not None:
            groups.setdefault((entry.bench.kind, host_key(entry.bench)), []).append(entry.bench)
    series = []
    for (kind, _), members in sorted(groups.items(), key=lambda item: item[0][0]):
        runs = tuple(sorted(members, key=lambda r: r.run_id))
        diffs = tuple(diff_benches(a, b) for a, b in itertools.pairwise(runs))
        series.append(BenchSeries(kind, host_label(runs[-1]), runs, diffs))
    return series


def _figure_cell(figure: BenchFigure, rounds: int, change: BenchChange | None) -> str:
    """A ratio with its interval, its verdict and rounds, and its change from the run
    before with that change's interval: short lines, so a phone's narrow column holds it."""
    css = VERDICT_CSS.get(figure.verdict, "")
    interval = figure.ratio_ci
    text = (
        f"<div><b>{escape(ratio_text(figure.ratio, None))}</b>"
        + (f' <span class="ci">[{interval[0]:.2f}, {interval[1]:.2f}]</span>' if interval else "")
        + f'</div><div><span class="{css}">{escape(figure.verdict)}</span> '
        f"({escape(figure.limit_text)}), {rounds} rounds</div>"
    )
    if change is not None and change.ratio_change is not None:
        moved = change.change.as_pair() if change.change is not None else None
        word = CHANGE_CSS.get(change.verdict, "muted")
        said = escape(ratio_text(change.ratio_change, moved))
        text += (
            f'<div class="muted">vs the run before: {said} '
            f'<span class="{word}">{escape(change.verdict)}</span></div>'
        )
    return text


def bench_rows(group: BenchSeries) -> tuple[list[str], list[list[str]]]:
    """The group as a table: a row per run (newest first), a column per framework and
    figure, each ratio with its interval and verdict and its change from the run before."""
    labels = list(bench_trend_series(group.runs))
    changes = {
        (diff.new_id, change.label): change for diff in group.diffs for change in diff.changes
    }
    rows = []
    for run in reversed(group.runs):
        cells = {
            f"{case.label} {figure.name}": _figure_cell(
                figure, case.rounds, changes.get((run.run_id, f"{case.label} {figure.name}"))
            )
            for case in run.cases
            for figure in case.figures
        }
        status_css = "ok" if run.status == "complete" else "failed"
        rows.append(
            [  # the short start first (a first column never wraps), the whole id last
                escape(run.started[5:16].replace("T", " ")),
                *(cells.get(label, "–") for label in labels),
                f'<span class="{status_css}">{escape(run.status)}</span>',
                escape(run.run_id),
            ]
        )
    return ["started (UTC)", *labels, "status", "run"], rows


def bench_intro() -> str:
    """What the bench page shows, in a paragraph."""
    return (
        "<p>Each bench measures our server against its framework's minimal app on the same "
        "core, in rounds that run both back to back. A ratio is ours / minimal with its 95 % "
        "interval; <em>within</em> means the whole interval meets the bench's limit, "
        "<em>undecided</em> that it straddles it. The change from the run before is B / A "
        f"of the two ratios with its 95 % interval; better or worse needs {escape(BENCH_RULE)} "
        "(<code>harness diff</code> of the two runs).</p>"
    )


def bench_index_section(count: int) -> str:
    """The index's pointer to the bench page ("" without bench runs)."""
    if not count:
        return ""
    return (
        f"<h2>Benches</h2><p>{count} bench run{'' if count == 1 else 's'} (ours against the "
        f'framework\'s minimal app): <a href="{BENCH_PAGE}">the bench page</a></p>'
    )


def trend_title(group: BenchSeries) -> str:
    return f"bench {group.kind} on {group.host}: {len(group.runs)} runs"


def bench_page_body(
    groups: Sequence[BenchSeries], table: Callable[[list[str], list[list[str]]], str]
) -> str:
    """The bench page's body: per group its title, what it measures, its trend chart
    (`<anchor>.png`, beside the page) and its table, rendered by `table`."""
    parts = [bench_intro()]
    for group in groups:
        parts.append(f'<h2 id="{escape(group.anchor)}">{escape(group.title)}</h2>')
        parts.append(f"<p>{escape(group.measures)}</p>")
        parts.append(
            f'<figure><img alt="{escape(trend_title(group))}" src="{escape(group.anchor)}.png">'
            "<figcaption>bars: 95 % interval of the ratio; dashed: the bench's limit"
            "</figcaption></figure>"
        )
        parts.append(table(*bench_rows(group)))
    return "".join(parts)


def draw_bench_trends(out_dir: Path, groups: Sequence[BenchSeries]) -> None:
    """Each group's trend chart, `<anchor>.png` in `out_dir`: each figure's ratio across
    the group's runs, the bench's limit dashed."""
    from charts.trend import write_trend

    for group in groups:
        series = bench_trend_series(group.runs)
        write_trend(out_dir / f"{group.anchor}.png", [run.run_id for run in group.runs], series,
                    {label: steps_beyond_noise(p) for label, p in series.items()},
                    trend_title(group), "ours / minimal", what="ratio", value_format="{x:.2f}×",
                    limits=bench_limits(group.runs))  # fmt: skip

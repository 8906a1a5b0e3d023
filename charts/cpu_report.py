"""report.html's --cpu-profile section: the split of each case's CPU µs per request as a
stacked bar per server (an inline SVG: nothing fetched), the split table, and each case's
top frames (charts.cpu_tables)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape

from charts.columns import RenderedTable
from charts.cpu_tables import CPU_SPLIT, PROFILED_CAPTION, profiled, top_frames_spec
from model.cpu_split import CATEGORIES
from model.figures import figure
from model.results import Case, Run

CATEGORY_COLOURS = {
    "kernel": "#c44e52",
    "runtime": "#4c72b0",
    "framework": "#55a868",
    "handler": "#dd8452",
    "other": "#8c8c8c",
}
# a frame's name breaks anywhere on a phone; a flame graph keeps its width and scrolls
SECTION_STYLE = (
    ".cpu-frames td:first-child{overflow-wrap:anywhere;white-space:normal}"
    ".flame-box{overflow-x:auto}.flame-box svg{min-width:900px}"
)
BAR_HEIGHT_PX = 22
LABEL_WIDTH_PX = 150
CHART_WIDTH_PX = 640


def _label(case: Case) -> str:
    return case.framework + (f" {case.protocol}" if case.protocol != "h1" else "")


def split_chart_svg(cases: list[Case]) -> str:
    """The split as one stacked horizontal bar per case, on one µs scale, with a legend;
    "" when no case has parts."""
    rows = [(c, (c.summary.cpu_profile or {}).get("parts_us")) for c in cases]
    rows = [(c, parts) for c, parts in rows if parts]
    if not rows:
        return ""
    longest_us = max(sum(parts.values()) for _, parts in rows) or 1.0
    scale = (CHART_WIDTH_PX - LABEL_WIDTH_PX - 60) / longest_us
    height = (len(rows) + 1) * (BAR_HEIGHT_PX + 8) + 10
    shapes = []
    for index, (case, parts) in enumerate(rows):
        y = index * (BAR_HEIGHT_PX + 8) + 4
        shapes.append(
            f'<text x="{LABEL_WIDTH_PX - 6}" y="{y + 15}" text-anchor="end">'
            f"{escape(_label(case))}</text>"
        )
        x = float(LABEL_WIDTH_PX)
        for category in CATEGORIES:
            width = parts.get(category, 0.0) * scale
            if width <= 0:
                continue
            shapes.append(
                f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT_PX}" '
                f'fill="{CATEGORY_COLOURS[category]}"><title>{escape(_label(case))} '
                f"{category}: {figure(parts[category])} µs/req</title></rect>"
            )
            x += width
        shapes.append(f'<text x="{x + 4:.1f}" y="{y + 15}">{figure(sum(parts.values()))} µs</text>')
    legend_y = len(rows) * (BAR_HEIGHT_PX + 8) + 16
    for index, category in enumerate(CATEGORIES):
        x = LABEL_WIDTH_PX + index * 95
        shapes.append(
            f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" '
            f'fill="{CATEGORY_COLOURS[category]}"/><text x="{x + 16}" y="{legend_y}">'
            f"{category}</text>"
        )
    return (
        f'<svg class="cpu-split" role="img" viewBox="0 0 {CHART_WIDTH_PX} {height + 6}" '
        f'width="100%" style="max-width:{CHART_WIDTH_PX}px;font:12px sans-serif">'
        f"<title>CPU µs per request by category, per server</title>{''.join(shapes)}</svg>"
    )


def cpu_profile_html(
    run: Run,
    html_table: Callable[[RenderedTable], str],
    flames: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The section (a heading, the chart, the table, each case's top frames and flame
    graph — `flames` by run id and case key — in a collapsed block); "" when no case of
    `run` was profiled."""
    cases = profiled(run.cases)
    if not cases:
        return ""
    parts = [
        f"<style>{SECTION_STYLE}</style>",
        "<h3>CPU per request: where the µs go</h3>",
        f"<p>{escape(PROFILED_CAPTION)}.</p>",
        split_chart_svg(cases),
        html_table(CPU_SPLIT.render(run.cases, "bracketed")),
    ]
    for case in cases:
        profile = case.summary.cpu_profile or {}
        top = profile.get("top_frames") or []
        flame = (flames or {}).get((run.run_id, case.key), "")
        if not top and not flame:
            continue
        note = f" — {profile['note']}" if profile.get("note") else ""
        parts.append(
            f"<details><summary>{escape(_label(case))}: top frames and flame graph"
            f"{escape(note)}</summary>"
            + "<div class='cpu-frames'>"
            + html_table(top_frames_spec(case, len(top)).render(top, "bracketed"))
            + "</div>"
            + (f"<div class='flame-box'>{flame}</div>" if flame else "")
            + "</details>"
        )
    return "".join(parts)

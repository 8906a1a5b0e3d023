"""What every HTML page the project writes shares (report.html, the published site, the
crosscheck page): the stylesheet, tables in the column model's style (tones as classes,
each interval beneath its figure), figures read from run.json, a line of links, and an
image embedded so the page opens from disk offline. Every text is escaped here or by the
caller before it is joined."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from charts.columns import Cell, RenderedTable, TableSpec, figure_text
from model.results import Case, Run

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222;
       padding: 0 1em; }
h1 { font-size: 1.6em; } h1, h2, h3, p, li, figcaption { overflow-wrap: anywhere; }
nav.links { font-size: .9em; margin-bottom: .5em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: .92em; }
th, td { border: 1px solid #ddd; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #1a7f37; } .failed { color: #cf222e; } .skipped, .incomplete, .warn { color: #9a6700; }
figure { margin: 1em 0 2em; }
/* border-box: a bordered image at 100 % would be 2 px wider than the page */
figure img { max-width: 100%; height: auto; border: 1px solid #eee; box-sizing: border-box; }
figcaption { color: #555; font-size: .9em; }
pre { background: #f6f8fa; padding: 1em; overflow-x: auto; }
.wide { max-width: 100%; overflow-x: auto; } td { overflow-wrap: break-word; }
/* a row's name whole: `uvicorn-starlette`, not `uvicorn-` over `starlette` */
td:first-child { white-space: nowrap; }
.ci { color: #555; font-size: .85em; white-space: nowrap; }
.verdict { background: #f6f8fa; border-left: 4px solid #0969da; padding: .6em 1em; }
.verdict ul { margin: .3em 0; padding-left: 1.2em; } .ratios { color: #555; font-size: .9em; }
/* a phone: tables smaller and tighter; a wide one keeps its columns readable (text wraps
   at 16em, not at the screen's width) and scrolls in its box */
@media (max-width: 600px) {
  body { margin: 1em auto; } table { font-size: .8em; } th, td { padding: .25em .35em; }
  .wide table { width: max-content; } td { max-width: 16em; }
}
"""


TONE_CLASSES = {"ok": "ok", "warn": "warn", "failed": "failed"}


def number(value: Any, pattern: str = "{:,.0f}") -> str:
    """A figure read from run.json (figure_text; `–` for anything but a number)."""
    return figure_text(value if isinstance(value, int | float) else None, spec=pattern)


def ms(value: Any) -> str:
    """A latency read from run.json, in ms with two decimals (`–` for anything but a
    number)."""
    return number(value, "{:,.2f}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """A table of cells already in HTML (escaped by the caller), the `numeric` columns
    right-aligned; the headers are escaped here."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    # a wide table scrolls inside its own box: the page itself never scrolls sideways
    return f'<div class="wide"><table><tr>{head}</tr>{body}</table></div>'


def _cell(cell: Cell) -> str:
    """A rendered cell as HTML: a link when it has one, its tone a class, its interval
    beneath the figure."""
    text = escape(cell.text)
    if cell.link:
        text = f'<a href="{escape(cell.link)}">{text}</a>'
    if cell.tone is not None:
        text = f'<span class="{TONE_CLASSES[cell.tone]}">{text}</span>'
    if cell.interval:
        text += f'<br><span class="ci">{escape(cell.interval)}</span>'
    return text


def spec_table(spec: TableSpec[Case], run: Run) -> str:
    """One of the run's tables (charts.tables) as HTML in the bracketed style; "" when
    it has no rows."""
    rendered = spec.render(run.cases, "bracketed")
    return html_table(rendered) if rendered else ""


def html_table(rendered: RenderedTable) -> str:
    """A table of the column model (charts.columns) as HTML: tones as classes, each
    interval beneath its figure."""
    rows = [[_cell(cell) for cell in row] for row in rendered.cells]
    return table(rendered.headers, rows, numeric=rendered.numeric_indexes())


def nav_html(links: Sequence[tuple[str, str]]) -> str:
    """A line of links (label, relative URL) above a page's title; "" without links."""
    if not links:
        return ""
    items = " · ".join(f'<a href="{escape(url)}">{escape(label)}</a>' for label, url in links)
    return f'<nav class="links">{items}</nav>'


def image(path: Path) -> str:
    """The PNG at `path` as an <img> with its bytes inline (base64), named by its stem."""
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{encoded}">'

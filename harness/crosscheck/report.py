"""Where a crosscheck is kept and how it is shown: `crosscheck-<UTC start>.json`
(model.crosscheck) beside its comparison runs in the results directory, drawn as
`.md` and `.html` of the same name and as the console's table, all three from one
table spec (charts.crosscheck.CROSSCHECK_TABLE).

`harness crosscheck --report FILE` draws the pages again from the JSON alone (a results
directory: its newest crosscheck).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from rich.text import Text

from charts.crosscheck import CROSSCHECK_TABLE, band_text, crosscheck_html
from harness.outputs.console import TONE_STYLES
from harness.outputs.markdown import rendered_table
from model.crosscheck import CrosscheckRun, read_crosscheck, write_crosscheck
from model.errors import UserError
from model.files import write_text_atomically

PREFIX = "crosscheck-"


def console_table(run: CrosscheckRun) -> Table:
    """The table for the terminal, compact style; long cells fold onto more lines (the
    why and the source must be read whole)."""
    rendered = CROSSCHECK_TABLE.render(run.results, "compact")
    table = Table(title=rendered.title)
    for header, numeric in zip(rendered.headers, rendered.numeric, strict=True):
        table.add_column(header, overflow="fold", justify="right" if numeric else "left")
    for row in rendered.cells:
        table.add_row(*(Text(c.joined, style=TONE_STYLES.get(c.tone or "", "")) for c in row))
    return table


def markdown(run: CrosscheckRun) -> str:
    """The crosscheck as a Markdown page: how it was judged, then the table."""
    return "\n".join(
        [
            "# Crosscheck: our ratios beside the published boards'",
            "",
            f"{band_text(run.band)} {run.note}",
            "",
            rendered_table(CROSSCHECK_TABLE.render(run.results, "bracketed")),
            "",
        ]
    )


@dataclass(frozen=True)
class Pages:
    """A crosscheck's files."""

    json: Path
    markdown: Path
    html: Path


def draw(json_path: Path, run: CrosscheckRun) -> Pages:
    """The Markdown and HTML pages of `run` beside its JSON file."""
    pages = Pages(json_path, json_path.with_suffix(".md"), json_path.with_suffix(".html"))
    write_text_atomically(pages.markdown, markdown(run))
    write_text_atomically(pages.html, crosscheck_html(run))
    return pages


def keep(run: CrosscheckRun, results_dir: Path, stamp: str) -> Pages:
    """Write `run` as `crosscheck-<stamp>.json` in `results_dir`, and its pages."""
    return draw(write_crosscheck(run, results_dir / f"{PREFIX}{stamp}.json"), run)


def back_link(stamp: str) -> tuple[str, str]:
    """The link from a comparison's report (in its run directory) to the crosscheck's page."""
    return "crosscheck", f"../{PREFIX}{stamp}.html"


def redraw(path: Path) -> tuple[CrosscheckRun, Pages]:
    """Draw a kept crosscheck's pages again: `path` its JSON file, or a results directory
    (its newest crosscheck). UserError naming what is wrong."""
    if path.is_dir():
        found = sorted(path.glob(f"{PREFIX}*.json"))
        if not found:
            raise UserError(f"{path} holds no {PREFIX}*.json: run harness crosscheck first")
        path = found[-1]
    if not path.is_file():
        raise UserError(f"{path}: no such crosscheck file")
    try:
        run = read_crosscheck(path)
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: {error}") from None
    return run, draw(path, run)

"""The crosscheck's table, defined once as columns (charts.columns) over its judgements
(model.crosscheck), and its HTML page (`crosscheck-<UTC start>.html`, templates/
crosscheck.html, autoescaped). The console (harness.crosscheck.report) and the Markdown
render the same spec, so the three outputs have the same headers and cells."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell
from charts.report import STYLE, html_table
from model.crosscheck import (
    AGREES,
    DISAGREES,
    INCONCLUSIVE,
    NOT_MEASURED,
    Crosscheck,
    CrosscheckRun,
)
from model.figures import figure

VERDICT_TONES: dict[str, Tone] = {
    AGREES: "ok",
    DISAGREES: "failed",
    INCONCLUSIVE: "warn",
    NOT_MEASURED: "warn",
}
REPORT_PAGE = "report.html"  # each comparison run's own page, in its run directory


def report_link(run_id: str) -> str:
    """A comparison's report.html, relative to the crosscheck's files (its run lies
    beside them, in the same results directory)."""
    return f"{run_id}/{REPORT_PAGE}"


def source_name(url: str) -> str:
    """A source's URL in a few words: `granian: tfb.md` for a file of a GitHub
    repository, the repository alone for its root, else the host."""
    parts = urlsplit(url)
    path = [p for p in parts.path.split("/") if p]
    if parts.netloc == "github.com" and len(path) >= 2:
        return f"{path[1]}: {path[-1]}" if len(path) > 2 else path[1]
    return parts.netloc or url


def _source(url: str, style: Style) -> Cell:
    """The terminal prints the whole URL (it has no links); a page links a short name."""
    return Cell(url) if style == "compact" else Cell(source_name(url), link=url)


def _ours(result: Crosscheck, style: Style) -> Cell:
    ours = result.ours
    if ours is None:
        return Cell("–")
    return figure_cell(ours.value, (ours.low, ours.high), style, spec="{:.2f}")


def _column(
    header: str, text: Callable[[Crosscheck], str], *, numeric: bool = False, wraps: bool = False
) -> Column[Crosscheck]:
    """A column of plain text read from a judgement."""
    return Column(header, value=text, format=lambda v, s: v, numeric=numeric, wraps=wraps)


CROSSCHECK_TABLE = TableSpec[Crosscheck](
    title="crosscheck: our ratios beside the published boards'",
    columns=(
        _column("pair", lambda r: r.pair.label),
        Column("ours [95 % CI]", value=lambda r: r, format=_ours, numeric=True),
        _column("published", lambda r: f"{r.pair.published:g}", numeric=True),
        Column(
            "verdict",
            value=lambda r: r.verdict,
            format=lambda v, s: Cell(v, tone=VERDICT_TONES[v]),
        ),
        _column(
            "test",
            lambda r: f"{r.pair.test} (ours: {r.pair.scenario}, c{figure(r.pair.concurrency)})",
        ),
        _column("why", lambda r: r.why, wraps=True),
        _column("what differs", lambda r: r.pair.differs, wraps=True),
        _column("board", lambda r: f"{r.pair.board}, {r.pair.date}"),
        Column("source", value=lambda r: r.pair.url, format=_source),
        Column(
            "comparison",
            value=lambda r: r.run_id,
            format=lambda v, s: Cell(v, link=report_link(v)) if v else Cell("–"),
            shown=lambda results: any(r.run_id for r in results),
        ),
    ),
)


def summary_line(results: Sequence[Crosscheck]) -> str:
    """`4 agrees, 1 disagrees, 1 not measured` (the counts that are not zero)."""
    counts: dict[str, int] = {}
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items())


def band_text(band: float) -> str:
    """How a verdict is reached, in one sentence (the pages' and the Markdown's)."""
    return (
        f"Agrees: the published ratio inside our 95 % interval widened by {band:.0%} "
        "(harness/crosscheck/published.toml says why the band)."
    )


def comparisons(run: CrosscheckRun) -> list[tuple[str, str, str]]:
    """Each comparison run once, in the order of the pairs: (run id, its report's link,
    what it measured: `json at c64: granian / uvicorn-starlette, …`)."""
    found: dict[str, list[Crosscheck]] = {}
    for result in run.results:
        if result.run_id:
            found.setdefault(result.run_id, []).append(result)
    return [
        (
            run_id,
            report_link(run_id),
            f"{results[0].pair.scenario} at c{figure(results[0].pair.concurrency)}: "
            + ", ".join(r.pair.label for r in results),
        )
        for run_id, results in found.items()
    ]


def crosscheck_html(run: CrosscheckRun) -> str:
    """The crosscheck as one HTML page: how the verdict is reached, the table, and a link
    to each comparison's report.html."""
    environment = Environment(
        loader=PackageLoader("charts", "templates"), autoescape=select_autoescape(["html"])
    )
    return environment.get_template("crosscheck.html").render(
        run=run,
        style=Markup(STYLE),  # the report's own style sheet, a constant of ours
        band=band_text(run.band),
        summary=summary_line(run.results),
        table=Markup(html_table(CROSSCHECK_TABLE.render(run.results, "bracketed"))),
        comparisons=comparisons(run),
    )

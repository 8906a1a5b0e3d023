"""`harness publish OUT_DIR`: a static site of every run under results/.

What it holds (every link relative, so it opens from a file:// path and from any static
host, no server needed):

- `index.html`: the runs grouped by profile and host, newest first — status, frameworks,
  each peak with its 95 % interval, the diff with the latest earlier run that shares a
  case with it (`previous_sharing`; none when no earlier run does: two runs of other
  frameworks have nothing to diff); unreadable directories listed with the reason;
- `runs/<run-id>/report.html`: each run's report (charts/report.py, with its charts
  beside it), a link back to the index above its title;
- `profiles/<profile>.html`: per host, each framework's peak across the profile's runs
  (the `harness trend` chart and a table), steps larger than noise marked as `harness
  trend` marks them (harness.history.steps_beyond_noise);
- `diffs/<run-a>__<run-b>.html`: `harness diff` between a run and the latest earlier run
  of its profile on its host that shares a case with it (harness.diff.diff_runs);
- `bench.html`: the bench runs (`harness bench http`, `bench ws`) by kind and host, each
  ratio ours / minimal with its interval and its change from the run before, and the
  ratio's trend (harness.publish_bench).

asv's `publish` is the model: the site is rebuilt from the results alone, and a run's
report already drawn (newer than its run.json) is kept rather than drawn again.

The page builders are pure functions of HistoryEntry, Run and RunDiff (unit-tested); the
I/O — reading runs, drawing, writing — is in `publish`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from charts.columns import interval_text
from charts.page import table as _table
from charts.report import STYLE, html_table, nav_html
from harness.diff import RULE, RunDiff, diff_runs
from harness.history import (
    HistoryEntry,
    TrendPoint,
    host_key,
    list_history,
    steps_beyond_noise,
    trend_series,
)
from harness.outputs.text import diff_table
from harness.publish_bench import (
    BENCH_PAGE,
    bench_index_section,
    bench_page_body,
    bench_series,
    draw_bench_trends,
)
from model.errors import UserError
from model.figures import figure
from model.results import READ_ERRORS, Run

SITE_STYLE = (
    STYLE
    + """
.step { color: #cf222e; font-weight: bold; } .muted { color: #666; }
td.peaks { white-space: normal; } .peaks div { white-space: nowrap; }
"""
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(text: str) -> str:
    """A file name made of `text`: letters, digits, `.`, `_`, `-` kept, the rest `-`."""
    return _UNSAFE.sub("-", text).strip("-.") or "unnamed"


@dataclass(frozen=True)
class Series:
    """The runs of one profile on one host, oldest first, and each run's diff with the
    latest earlier one that shares a case with it (`previous_sharing`)."""

    profile: str
    host: str
    runs: tuple[Run, ...]
    diffs: tuple[RunDiff, ...] = field(default=())

    @property
    def anchor(self) -> str:
        return slug(f"{self.profile}-{self.host}")


def host_label(run: Run) -> str:
    """The host as the site names it: `vm (AMD EPYC, 2 cores)` — the facts runs are
    grouped by, since two machines may share a hostname."""
    host = run.host
    facts = [
        str(host.get("cpu_model") or ""),
        f"{host.get('cores')} cores" if host.get("cores") else "",
    ]
    details = ", ".join(f for f in facts if f)
    return str(host.get("hostname", "")) + (f" ({details})" if details else "")


def group_series(entries: Sequence[HistoryEntry]) -> list[Series]:
    """Readable runs grouped by profile and host (the facts `harness diff` checks), each
    group oldest first; groups ordered by profile, then by their newest run, newest first."""
    groups: dict[tuple[str, tuple[Any, ...]], list[HistoryEntry]] = {}
    for entry in entries:
        if entry.run is not None:
            groups.setdefault((entry.profile, host_key(entry.run)), []).append(entry)
    series = []
    for (profile, _), members in groups.items():
        runs = tuple(sorted((e.run for e in members if e.run), key=lambda r: r.run_id))
        diffs = tuple(diff_runs(a, b) for a, b in previous_sharing(runs))
        series.append(Series(profile, host_label(runs[-1]), runs, diffs))
    series.sort(key=lambda s: s.runs[-1].run_id, reverse=True)
    series.sort(key=lambda s: s.profile)
    return series


def previous_sharing(runs: Sequence[Run]) -> list[tuple[Run, Run]]:
    """Each run (oldest first) paired with the latest run before it that shares a case
    with it (the same Case.identity: framework, scenario, sink, driver, process model,
    affinity mode, protocol), as (earlier, later); a run that no earlier run shares a case
    with is in no pair, since a diff of two runs without a case in common says nothing."""
    pairs = []
    identities = [{case.identity for case in run.cases} for run in runs]
    for index, run in enumerate(runs):
        earlier = (j for j in reversed(range(index)) if identities[j] & identities[index])
        found = next(earlier, None)
        if found is not None:
            pairs.append((runs[found], run))
    return pairs


def previous_ids(runs: Sequence[Run]) -> dict[str, str | None]:
    """Each run's id → the id of the run just before it (None for the first)."""
    ids = [run.run_id for run in runs]
    return dict(zip(ids, [None, *ids[:-1]], strict=True))


def diff_cell(diff: RunDiff | None, previous_id: str | None, href: str, short: bool = False) -> str:
    """A run's diff link (`href`: its page): with the run just before (`previous_id`), or
    with an older one that shares cases, named; a muted note when runs came before but
    none shares a case. `short`: "diff" for the run just before (a table's narrow column)."""
    if previous_id is None:
        return ""
    if diff is None:
        return "<span class='muted'>no earlier run shares a case</span>"
    if diff.old_id != previous_id:
        return _link(href, f"diff with {diff.old_id}")
    return _link(href, "diff" if short else "diff with the run before")


# -- where each page lies, from the site's root ----------------------------------------------
def run_page(run_id: str) -> str:
    return f"runs/{slug(run_id)}/report.html"


def profile_page(profile: str) -> str:
    return f"profiles/{slug(profile)}.html"


def diff_page(diff: RunDiff) -> str:
    return f"diffs/{slug(diff.old_id)}__{slug(diff.new_id)}.html"


def _page(title: str, body: str, links: Sequence[tuple[str, str]] = ()) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{SITE_STYLE}</style></head><body>{nav_html(links)}<h1>{escape(title)}</h1>"
        f"{body}</body></html>\n"
    )


def _link(url: str, text: str) -> str:
    return f'<a href="{escape(url)}">{escape(text)}</a>'


def _peaks_cell(entry: HistoryEntry) -> str:
    return "".join(
        f"<div>{escape(label)} {escape(text)}</div>" for label, text in entry.peak_texts()
    )


def _status_cell(status: str) -> str:
    css = {"complete": "ok", "running": "incomplete", "unknown": "incomplete"}.get(status, "failed")
    return f'<span class="{css}">{escape(status)}</span>'


def index_html(
    entries: Sequence[HistoryEntry],
    series: Sequence[Series],
    reports: dict[str, str | None],
    generated: str,
) -> str:
    """The index: each profile-and-host group's runs, newest first. `reports`: run id →
    why its report could not be drawn (None: drawn)."""
    readable = [e for e in entries if e.run is not None]
    profiles = sorted({s.profile for s in series})
    parts = [
        f"<p>{len(readable)} runs of {len(profiles)} profiles; generated {escape(generated)}. "
        "Peaks are req/s (connections for connection ramps) with their 95 % intervals in "
        "brackets where the run measured confirmation rounds.</p>"
    ]
    if profiles:
        parts.append(
            "<p>Trends: " + " · ".join(_link(profile_page(p), p) for p in profiles) + "</p>"
        )
    for group in series:
        parts.append(
            f'<h2 id="{escape(group.anchor)}">{escape(group.profile)} on {escape(group.host)}</h2>'
        )
        parts.append(
            f"<p>{len(group.runs)} run{'' if len(group.runs) == 1 else 's'} · "
            + _link(f"{profile_page(group.profile)}#{group.anchor}", "trend")
            + "</p>"
        )
        by_id = {e.run.run_id: e for e in readable if e.run is not None}
        before = {d.new_id: d for d in group.diffs}
        rows = []
        previous = previous_ids(group.runs)
        for run in reversed(group.runs):
            entry = by_id[run.run_id]
            problem = reports.get(run.run_id)
            name = (
                _link(run_page(run.run_id), run.run_id)
                if problem is None
                else f"{escape(run.run_id)}<br><span class='muted'>no report: "
                f"{escape(problem)}</span>"
            )
            diff = before.get(run.run_id)
            rows.append(
                [
                    name,
                    escape(run.started[:19].replace("T", " ")),
                    _status_cell(entry.status),
                    escape(", ".join(entry.frameworks)),
                    _peaks_cell(entry) or "–",
                    diff_cell(diff, previous[run.run_id], diff_page(diff) if diff else ""),
                ]
            )
        parts.append(
            _table(
                ["run", "started (UTC)", "status", "frameworks", "peaks [95 %]", "diff"],
                rows,
                set(),
            )
        )
    parts.append(bench_index_section(sum(e.bench is not None for e in entries)))
    unreadable = [e for e in entries if e.problem is not None]
    if unreadable:
        parts.append("<h2>Unreadable</h2>")
        parts.append(
            _table(
                ["directory", "why"],
                [[escape(e.name), escape(e.problem or "")] for e in unreadable],
                set(),
            )
        )
    if not entries:
        parts.append("<p>No runs yet.</p>")
    return _page("serverbench results", "".join(parts))


def trend_image(group: Series) -> str:
    """The trend chart's file, beside the profile page."""
    return f"{slug(group.profile)}-{slug(group.host)}.png"


def trend_rows(group: Series) -> tuple[list[str], list[list[str]]]:
    """The trend as a table: a row per run (newest first), a column per case, each peak
    with its interval, a step beyond the noise marked with its ratio."""
    series = trend_series(group.runs)
    steps = {label: set(steps_beyond_noise(points)) for label, points in series.items()}
    labels = list(series)
    cells: dict[str, dict[str, str]] = {run.run_id: {} for run in group.runs}
    for label, points in series.items():
        for index, point in enumerate(points):
            text = _trend_cell(point)
            if index in steps[label]:
                ratio = point.value / points[index - 1].value
                arrow = "▲" if ratio >= 1 else "▼"
                text += (
                    f' <span class="step" title="a step beyond the noise">'
                    f"{arrow} {ratio:.2f}×</span>"
                )
            cells[point.run_id][label] = text
    before = {d.new_id: d for d in group.diffs}
    previous = previous_ids(group.runs)
    rows = []
    for run in reversed(group.runs):
        diff = before.get(run.run_id)
        href = f"../{diff_page(diff)}" if diff else ""
        rows.append(
            [
                _link(f"../{run_page(run.run_id)}", run.run_id),
                _status_cell(run.status),
                *(cells[run.run_id].get(label, "–") for label in labels),
                diff_cell(diff, previous[run.run_id], href, short=True),
            ]
        )
    return ["run", "status", *labels, "diff"], rows


def _trend_cell(point: TrendPoint) -> str:
    text = figure(point.value)
    if point.interval is not None:
        text += f' <span class="ci">{interval_text(point.interval)}</span>'
    return text


def profile_html(profile: str, groups: Sequence[Series], images: dict[str, str]) -> str:
    """A profile's page: per host, the trend chart and its table. `images`: anchor →
    the chart's file name (relative to the page)."""
    parts = [
        "<p>Each framework's peak across the runs of this profile on one host, with its "
        "95 % interval. A <span class='step'>step</span> (▲ faster, ▼ slower, with the "
        "ratio) is a change between consecutive runs whose intervals do not overlap, as "
        "<code>harness trend</code> marks it; without intervals nothing is called a step.</p>"
    ]
    for group in groups:
        parts.append(f'<h2 id="{escape(group.anchor)}">on {escape(group.host)}</h2>')
        image = images.get(group.anchor)
        if image:
            parts.append(
                f'<figure><img alt="trend {escape(profile)} on {escape(group.host)}" '
                f'src="{escape(image)}"><figcaption>{len(group.runs)} runs; bars: 95 % '
                "interval; red ring: a step beyond the noise</figcaption></figure>"
            )
        headers, rows = trend_rows(group)
        parts.append(_table(headers, rows, set(range(2, len(headers) - 1))))
    return _page(f"profile {profile}", "".join(parts), [("all runs", "../index.html")])


def diff_html(diff: RunDiff, profile: str) -> str:
    """`harness diff` of a run and the earlier run it shares cases with, as a page."""
    parts = [
        f"<p>A: {_link(f'../{run_page(diff.old_id)}', diff.old_id)} → B: "
        f"{_link(f'../{run_page(diff.new_id)}', diff.new_id)}; factor {diff.factor:g}. "
        f"A verdict needs {escape(RULE)} (<code>harness diff</code>).</p>",
        html_table(diff_table(diff).render(diff.cases, "bracketed")),
    ]
    for side, names in (("A", diff.only_in_old), ("B", diff.only_in_new)):
        if names:
            parts.append(f"<p>only in {side}: {escape(', '.join(names))}</p>")
    if diff.worse:
        names = ", ".join(c.label for c in diff.worse)
        parts.append(f'<p class="failed">slower beyond {diff.factor:g}×: {escape(names)}</p>')
    links = [("all runs", "../index.html"), (f"profile {profile}", f"../{profile_page(profile)}")]
    return _page(f"diff {diff.old_id} → {diff.new_id}", "".join(parts), links)


# -- the I/O -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Site:
    """What `publish` wrote."""

    index: Path
    runs: int
    drawn: int  # reports drawn this time (the rest were up to date)
    profiles: int
    diffs: int
    unreadable: int
    problems: dict[str, str]  # run id → why its report could not be drawn
    benches: int = 0  # bench runs on the bench page


def _draw_report(run_dir: Path, out_dir: Path) -> tuple[bool, str | None]:
    """The run's report in `out_dir`, drawn unless one newer than its run.json is there;
    (drawn now, why it could not be drawn)."""
    from charts.render import render

    report = out_dir / "report.html"
    source = run_dir / "run.json"
    if report.is_file() and report.stat().st_mtime >= source.stat().st_mtime:
        return False, None
    try:
        render([run_dir], out_dir, links=[("all runs", "../../index.html")])
    except (UserError, *READ_ERRORS) as error:
        return False, f"{type(error).__name__}: {error}"[:200]
    return True, None


def publish(results_dir: Path, out_dir: Path, now: datetime | None = None) -> Site:
    """Build the site of every run under `results_dir` into `out_dir` (made if missing).
    A UserError when `results_dir` is not a directory or `out_dir` lies inside it."""
    from charts.trend import write_trend

    if not results_dir.is_dir():
        raise UserError(f"no results directory {results_dir}: give one with --results")
    if out_dir.resolve().is_relative_to(results_dir.resolve()):
        raise UserError(
            f"{out_dir} is inside {results_dir}: publish would list its own pages as runs; "
            "give an OUT_DIR outside the results"
        )
    entries = list_history(results_dir)
    series = group_series(entries)
    out_dir.mkdir(parents=True, exist_ok=True)
    problems: dict[str, str] = {}
    reports: dict[str, str | None] = {}
    drawn = 0
    for entry in entries:
        if entry.run is None:
            continue
        run_dir = out_dir / "runs" / slug(entry.run.run_id)
        fresh, problem = _draw_report(results_dir / entry.name, run_dir)
        drawn += fresh
        reports[entry.run.run_id] = problem
        if problem is not None:
            problems[entry.run.run_id] = problem
    by_profile: dict[str, list[Series]] = {}
    for group in series:
        by_profile.setdefault(group.profile, []).append(group)
    (out_dir / "profiles").mkdir(exist_ok=True)
    (out_dir / "diffs").mkdir(exist_ok=True)
    for profile, groups in by_profile.items():
        images = {}
        for group in groups:
            points = trend_series(group.runs)
            units = {c.summary.peak_unit for run in group.runs for c in run.cases}
            image = trend_image(group)
            write_trend(
                out_dir / "profiles" / image,
                [run.run_id for run in group.runs],
                points,
                {label: steps_beyond_noise(p) for label, p in points.items()},
                f"profile {profile} on {group.host}: {len(group.runs)} runs",
                unit="/".join(sorted(units)) or "req/s",
            )
            images[group.anchor] = image
        (out_dir / profile_page(profile)).write_text(profile_html(profile, groups, images))
    diffs = 0
    for group in series:
        for diff in group.diffs:
            (out_dir / diff_page(diff)).write_text(diff_html(diff, group.profile))
            diffs += 1
    benches = bench_series(entries, host_label)
    if benches:
        draw_bench_trends(out_dir, benches)
        body = bench_page_body(benches, lambda headers, rows: _table(headers, rows, set()))
        links = [("all runs", "index.html")]
        (out_dir / BENCH_PAGE).write_text(_page("serverbench benches", body, links))
    generated = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    index = out_dir / "index.html"
    index.write_text(index_html(entries, series, reports, generated))
    return Site(
        index,
        len(reports),
        drawn,
        len(by_profile),
        diffs,
        sum(e.problem is not None for e in entries),
        problems,
        sum(len(group.runs) for group in benches),
    )

"""Markdown (`--markdown FILE`): a run, a diff or a verify as a CI job's step summary
(GitHub's `$GITHUB_STEP_SUMMARY`, GitLab's and Forgejo's comments render it alike).

A compare or run: the status, the verdict in words, the summary table with each
interval beside its figure, the threshold judgements, the flags raised and what they
mean, and links to the charts and the report (relative to the Markdown file, so they
resolve where the file lies beside the results). A diff: each case's ratio with its
interval and the verdict. A verify: each framework's checks, failures first.

Pure functions from the model to text; `write_output` (harness.outputs) writes it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from charts.attack_tables import ATTACKS, attack_rows
from charts.columns import Cell, RenderedTable, interval_text
from charts.cpu_tables import CPU_SPLIT, PROFILED_CAPTION
from charts.tables import CLOSING, MEMORY, PRECISION, SUMMARY, TLS, VERDICT_TITLE, verdict_lines
from harness.outputs.text import diff_table
from model.figures import figure
from model.results import FLAG_MEANINGS, Run

if TYPE_CHECKING:
    from harness.diff import RunDiff
    from harness.verify import Verification


def cell(text: str) -> str:
    """Text made safe for one table cell: pipes escaped, lines joined (a cell is one line)."""
    return " ".join(text.replace("|", "\\|").split())


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    """A GitHub-flavoured Markdown table; columns in `right` aligned right (figures)."""
    rule = ["---:" if i in right else "---" for i in range(len(headers))]
    lines = [headers, rule, *rows]
    return "\n".join("| " + " | ".join(cell(str(c)) for c in line) + " |" for line in lines)


def _cell_text(cell: Cell) -> str:
    """A cell's Markdown: a link when its text is not the URL itself (a bare URL links
    itself), bold when failed or warned."""
    text = cell.joined
    if cell.link and cell.link != text:
        text = f"[{text}]({cell.link})"
    return f"**{text}**" if cell.tone in ("failed", "warn") else text


def rendered_table(rendered: RenderedTable) -> str:
    """A table of the column model (charts.columns) as Markdown: a cell with a link a
    link, a failed or warned cell in bold."""
    rows = [[_cell_text(cell) for cell in row] for row in rendered.cells]
    return table(rendered.headers, rows, rendered.numeric_indexes())


# the run's tables in the order the Markdown gives them, each under its heading
RUN_TABLES = (
    (SUMMARY, ""),
    (CPU_SPLIT, f"**CPU per request** ({PROFILED_CAPTION})"),
    (PRECISION, "**Precision** (each case measured in rounds)"),
    (TLS, "**Protocols** (what each server negotiated, and its TLS tax)"),
    (CLOSING, "**Close storm** (every connection closed at once at the ramp's end)"),
    (MEMORY, "**Connections** (where each server stopped, memory per connection)"),
)


def _link(target: Path, base: Path | None) -> str:
    """`target` relative to `base` (the Markdown file's directory), as a URL path."""
    if base is None:
        return target.as_posix()
    return Path(os.path.relpath(target.resolve(), base.resolve())).as_posix()


def run_markdown(run: Run, run_dir: Path | None = None, base: Path | None = None) -> str:
    """A run as Markdown. `run_dir`: where its charts and report lie (linked when they
    exist); `base`: the directory the Markdown file is written in."""
    status = run.status + (f": {run.status_reason}" if run.status_reason else "")
    profile = (run.config.get("profile") or {}).get("name", "")
    parts = [f"## Run `{run.run_id}` ({profile}): {status}", ""]
    verdict = verdict_lines(run.verdict)
    if verdict:
        parts += [f"**{VERDICT_TITLE}**", ""]
        for line in verdict:
            ratios = f"  \n  {'; '.join(line.ratios)}" if line.ratios else ""
            parts.append(f"- {line.head}{ratios}")
        parts.append("")
    for spec, heading in RUN_TABLES:
        rendered = spec.render(run.cases, "bracketed")
        if rendered:
            parts += [heading, ""] if heading else []
            parts += [rendered_table(rendered), ""]
    attacks = ATTACKS.render(attack_rows(run.cases), "bracketed")
    if attacks:
        parts += [f"**{ATTACKS.title}** (with / without, 95 % interval over the pairs)", ""]
        parts += [rendered_table(attacks), ""]
    if run.thresholds:
        failed = [t for t in run.thresholds if not t.held]
        parts.append(
            f"**Thresholds**: {len(failed)} of {len(run.thresholds)} failed"
            if failed
            else f"**Thresholds**: all {len(run.thresholds)} held"
        )
        parts.append("")
        parts.append(
            table(
                ["rule", "case", "value", "interval", "judged on", "result"],
                [
                    [
                        t.rule,
                        t.case,
                        figure(t.value),
                        interval_text(t.interval),
                        t.judged_on,
                        "held" if t.held else "**FAILED**",
                    ]
                    for t in run.thresholds
                ],
                {2, 3},
            )
        )
        parts.append("")
    raised = list(dict.fromkeys(f for c in run.cases for f in c.summary.flags))
    if raised:
        parts.append("**Flags**")
        parts.append("")
        parts += [f"- `{flag}`: {FLAG_MEANINGS[flag]}" for flag in raised]
        parts.append("")
    warned = [
        (c.framework, d) for c in run.cases for d in c.deviations if d.get("declared") is None
    ]
    if warned:
        parts += ["**Deviations** (warnings: measured; `--strict-verify` fails them)", ""]
        parts += [
            f"- {name}: {d.get('check')} `{d.get('key')}`: sent {d.get('sent')}; expected "
            f"{d.get('expected')}; came {d.get('came')} — declare it in the server's "
            "`deviations` to accept it"
            for name, d in warned
        ]
        parts.append("")
    notes = list(dict.fromkeys(c.summary.limit_note for c in run.cases if c.summary.limit_note))
    parts += [f"> note: {note}" for note in notes] + ([""] if notes else [])
    if run_dir is not None:
        links = []
        report = run_dir / "report.html"
        if report.is_file():
            links.append(f"[report]({_link(report, base)})")
        charts = sorted((run_dir / "charts").glob("*.png"))
        links += [f"[{png.stem}]({_link(png, base)})" for png in charts]
        links.append(f"[run.json]({_link(run_dir / 'run.json', base)})")
        parts += ["**Files**: " + " · ".join(links), ""]
    return "\n".join(parts)


def diff_markdown(result: RunDiff) -> str:
    """A diff as Markdown: each case's B/A with its interval, the p and the verdict."""
    from harness.diff import RULE  # the statistics: loaded only when a diff is asked for

    parts = [f"## Diff: A `{result.old_id}` → B `{result.new_id}` (factor {result.factor:g})", ""]
    if result.other_host:
        parts += [f"**Different hosts**: {'; '.join(result.other_host)}", ""]
    if result.other_limits:
        parts += [f"**Different limits**: {'; '.join(result.other_limits)}", ""]
    parts += [rendered_table(diff_table(result).render(result.cases, "bracketed")), ""]
    for side, names in (("A", result.only_in_old), ("B", result.only_in_new)):
        if names:
            parts += [f"only in {side}: {', '.join(names)}", ""]
    if result.worse:
        names = ", ".join(c.label for c in result.worse)
        parts += [f"**Slower beyond {result.factor:g}×**: {names}", ""]
    else:
        parts += [f"No case slower beyond {result.factor:g}×.", ""]
    parts += [
        f"Verdict: {RULE}.",
        "",
    ]
    return "\n".join(parts)


def verify_markdown(results: Sequence[Verification]) -> str:
    """A verify as Markdown: one row per check, failures first."""
    rows = []
    for verification in results:
        who = [verification.framework, verification.sink, verification.protocol]
        if verification.skipped:
            rows.append((2, [*who, "-", "skipped", verification.skipped]))
        if verification.error:
            rows.append((0, [*who, "start", "**FAIL**", verification.error]))
        for check in verification.checks:
            if not check.supported:
                rows.append((2, [*who, check.name, "not supported", check.detail]))
            elif not check.ok:
                rows.append((0, [*who, check.name, "**FAIL**", check.detail]))
            elif check.warnings:
                lines = "; ".join(
                    f"warning: {d.line(verification.framework)}" for d in check.warnings
                )
                rows.append(
                    (1, [*who, check.name, "ok, with warnings", f"{check.detail}; {lines}"])
                )
            else:
                rows.append((1, [*who, check.name, "ok", check.detail]))
    rows.sort(key=lambda r: r[0])
    offered = [v for v in results if not v.skipped]
    passed = sum(v.ok for v in offered)
    head = f"## Verify: {passed} of {len(offered)} passed"
    headers = ["framework", "sink", "protocol", "check", "result", "detail"]
    body = table(headers, [r for _, r in rows], set())
    return f"{head}\n\n{body}\n"

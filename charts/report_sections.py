"""report.html's sections of one run's results, before the figures: its heading with the
verdict and how it ran, the summary (with the CPU profile, the thresholds and the
precision), then each section the run has reason for: protocols, connections, the close
storm, knees, latency at equal load.

Each section is a list of the page's parts (report.render_html joins them with newlines);
a section the run has nothing for is an empty list, or "" where the page always had a
line for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from charts.attack_tables import ATTACKS, attack_rows
from charts.columns import figure_text, interval_text
from charts.cpu_report import cpu_profile_html
from charts.page import html_table, spec_table, table
from charts.report_rows import EQUAL_LOAD_HEADERS, KNEE_HEADERS, equal_load_rows, knee_rows
from charts.tables import (
    CLOSING,
    MEMORY,
    PRECISION,
    SUMMARY,
    TLS,
    VERDICT_TITLE,
    pinning_text,
    verdict_lines,
)
from model.ramps import ramp_from_dict, ramps_text
from model.results import Run


def run_sections(run: Run, flames: Mapping[tuple[str, str], str]) -> list[str]:
    """Every section of the run's results, in the page's order (`flames`: the profiled
    cases' flame graphs by run id and case key)."""
    return [
        *heading_section(run),
        *summary_section(run, flames),
        *protocols_section(run),
        *connections_section(run),
        *close_storm_section(run),
        *attacks_section(run),
        *knees_section(run),
        *equal_load_section(run),
    ]


def heading_section(run: Run) -> list[str]:
    """The run's heading, its verdict, then its profile, ramp, times, pinning and status."""
    profile = run.config.get("profile", {})
    pinning = pinning_text(
        str(profile.get("affinity", "both")),
        run.config.get("server_cpus"),
        run.config.get("agent_cpus"),
    )
    return [
        f"<h2>Run {escape(run.run_id)}</h2>",
        verdict_html(run),
        f"<p>{escape(str(profile.get('name', '')))}: "
        f"{escape(str(profile.get('description', '')))}<br>{ramp_as_run(profile)}"
        f"started {escape(run.started)}, "
        f"finished {escape(str(run.finished))}; " + escape(pinning) + f"<br>{status_html(run)}</p>",
    ]


def summary_section(run: Run, flames: Mapping[tuple[str, str], str]) -> list[str]:
    """The summary table, the CPU profile (--cpu-profile), the thresholds and the
    precision; each of the last three "" when the run has none."""
    return [
        "<h3>Summary</h3>",
        spec_table(SUMMARY, run),
        cpu_profile_html(run, html_table, flames),
        thresholds_html(run),
        precision_html(run),
    ]


def protocols_section(run: Run) -> list[str]:
    """What each server negotiated, and the TLS tax (charts.tables.TLS)."""
    tls = spec_table(TLS, run)
    if not tls:
        return []
    return [
        "<h3>Protocols</h3>",
        "<p>What each server negotiated with the harness's probe connection right "
        "after it started (Python <code>ssl</code>, trusting the run's CA). The TLS "
        "tax is an h1-tls peak over the same server's h1 peak in this run, with its "
        "95 % interval when both ran rounds (paired round by round).</p>",
        tls,
    ]


def connections_section(run: Run) -> list[str]:
    """Each connection ramp's top held step, its break and its memory per connection
    (charts.tables.MEMORY)."""
    connections = spec_table(MEMORY, run)
    if not connections:
        return []
    return [
        "<h3>Connections</h3>",
        "<p>Each connection ramp's top held step, where it broke (and the limit that "
        "stopped it), and its memory per connection: the server's cgroup (its RSS "
        "without one), the agents' RSS, the kernel's slab (both ends of each "
        "connection on this box) and the whole host's available memory, each the "
        "slope over the held steps; and what the host had left at the top step.</p>",
        connections,
    ]


def close_storm_section(run: Run) -> list[str]:
    """Every connection closed at once at a connection ramp's end (charts.tables.CLOSING)."""
    closing = spec_table(CLOSING, run)
    if not closing:
        return []
    return [
        "<h3>Close storm</h3>",
        "<p>Every connection closed at once at the ramp's end.</p>",
        closing,
    ]


def attacks_section(run: Run) -> list[str]:
    """What one hostile HTTP/2 connection cost each server's well-behaved clients
    (charts.attack_tables.ATTACKS)."""
    rendered = ATTACKS.render(attack_rows(run.cases), "bracketed")
    if not rendered:
        return []
    return [
        "<h3>HTTP/2 attacks</h3>",
        "<p>The well-behaved clients' goodput in rounds with one attacking connection over "
        "the rounds beside them without (the geometric mean of the pairs' ratios, its 95 % "
        "interval beneath), their p99 latency with and without (medians over the rounds), "
        "and how the attacker's connection ended.</p>",
        html_table(rendered),
    ]


def knees_section(run: Run) -> list[str]:
    """Each open-loop case's knee, when at least one case found one."""
    knees = knee_rows(run)
    if not knees or all(case.summary.knee is None for case in run.cases):
        return []
    return ["<h3>Knees</h3>", table(KNEE_HEADERS, knees, numeric={1, 2, 3, 4, 5})]


def equal_load_section(run: Run) -> list[str]:
    """Every framework's latency at each offered rate all of them ran (open loop)."""
    equal = equal_load_rows(run)
    if not equal:
        return []
    return [
        "<h3>Latency at equal load (open loop, ms)</h3>",
        "<p>From each request's intended send (corrected for coordinated omission) "
        "and, for p99 and p99.9, from its actual send (uncorrected).</p>",
        table(EQUAL_LOAD_HEADERS, equal, numeric=set(range(2, 10)) | {0}),
    ]


def ramp_as_run(profile: dict[str, Any]) -> str:
    """'ramp as run: …<br>' from a run's profile, or nothing (a file from before the ramp
    was recorded, or one this version cannot read back)."""
    try:
        ramp = ramp_from_dict(profile["ramp"])
        connection = profile.get("connection_ramp")
        text = ramps_text(
            ramp, ramp_from_dict({"kind": "connections", **connection}) if connection else None
        )
    except (KeyError, TypeError, ValueError):
        return ""
    return f"ramp as run: {escape(text)}<br>"


def status_html(run: Run) -> str:
    """How the run ended, in bold unless complete: a partial run must not look finished."""
    if run.status == "complete":
        return "status: complete"
    what = {
        "running": "running — or its harness was killed before it could write an end",
        "unknown": "unknown",
    }.get(run.status, run.status)
    reason = f" ({escape(run.status_reason)})" if run.status_reason else ""
    return f"status: <b class='failed'>{escape(what)}</b>{reason}: the figures cover part of it"


def verdict_html(run: Run) -> str:
    """The run's verdict in words (charts.tables.verdict_lines), first in its section: the
    ranking with ties ("aiohttp ≈ twisted") and each neighbour ratio with its interval; one
    line per comparable set when the run has several. "" for a run without one."""
    lines = []
    for line in verdict_lines(run.verdict):
        where = f"<b>{escape(line.where)}:</b> " if line.where else ""
        ratios = (
            f'<br><span class="ratios">{escape("; ".join(line.ratios))}</span>'
            if line.ratios
            else ""
        )
        lines.append(f"<li>{where}{escape(line.sentence)}{ratios}</li>")
    if not lines:
        return ""
    return f'<div class="verdict"><b>{VERDICT_TITLE}</b><ul>{"".join(lines)}</ul></div>'


def thresholds_html(run: Run) -> str:
    """The run's threshold rules against each case ("" without rules): a failure first
    in words, then the table."""
    if not run.thresholds:
        return ""
    failed = [t for t in run.thresholds if not t.held]
    rows = [
        [
            escape(t.rule),
            escape(t.case),
            figure_text(t.value),
            interval_text(t.interval),
            escape(t.judged_on),
            '<span class="ok">held</span>' if t.held else '<span class="failed">FAILED</span>',
        ]
        for t in run.thresholds
    ]
    verdict = (
        f'<p class="failed">{len(failed)} of {len(rows)} threshold checks failed: '
        + escape("; ".join(f"{t.rule} ({t.case})" for t in failed))
        + "</p>"
        if failed
        else f'<p class="ok">all {len(rows)} threshold checks held</p>'
    )
    rules = table(["rule", "case", "value", "interval", "judged on", "result"], rows, {2, 3})
    return f"<h3>Thresholds</h3>{verdict}{rules}"


def precision_html(run: Run) -> str:
    """Each case measured in rounds (charts.tables.PRECISION); "" when no case ran rounds."""
    precision = spec_table(PRECISION, run)
    return f"<h3>Precision</h3>{precision}" if precision else ""

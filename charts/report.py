"""`report.html`: one self-contained page (images embedded) that opens from disk offline."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from charts.columns import Cell, RenderedTable, TableSpec, figure_text, interval_text
from charts.cpu_report import cpu_profile_html
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
from model.figures import figure
from model.ramps import ramp_from_dict, ramps_text
from model.results import FLAG_MEANINGS, Case, Run

# the reconcile fields the report shows (docs/results.md); old runs lack the last two
REPORTED_RECONCILE = ("sent", "stored", "lost", "duplicates", "unparseable")
FIGURE_CAPTIONS = {
    "throughput": "Achieved replies/s against the offered load (rate ramps: the ideal y = x); "
    "a log scale when one framework's best is more than 5× another's.",
    "errors": "Errors per step and error rate: timeouts, refused and reset connections, non-2xx.",
    "latency": "Average (left) and p99 (right) latency seen by the load generator. On a "
    "concurrency ramp (closed loop: wrk, ab, siege) each framework's latency is read at "
    "whatever rate it reached, so two frameworks' figures are not at the same load.",
    "latency_rate": "Open loop: p99 (solid) and p50 (dotted) from each request's intended "
    "send against the offered rate, the same rates for every framework; the star marks "
    "each framework's knee, the first rate from which p99 stays above 3× its floor (the "
    "lowest p99 at lighter loads) and 1 ms over it, or the step did not hold.",
    "spectrum": "Percentile spectrum (HdrHistogram plot) at the highest offered rate every "
    "framework held: latency against 1/(1−p), p50 to p99.999, from whole histograms. Solid: "
    "from the intended send (corrected for coordinated omission); dashed: from the actual "
    "send (what a closed-loop tool reports). A line ends where its requests run out.",
    "cpu": "Server process-tree CPU, % of one core, averaged over each step.",
    "memory": "Server resident memory, the maximum in each step.",
    "efficiency": "The server's CPU per reply at its peak (its cgroup's CPU time over the "
    "step's replies, every process it started counted; error bars: the 95 % interval over "
    "rounds) and, above each bar, the replies one CPU-second buys: the cost of a request, "
    "which moves less with the machine than the peak does.",
    "peak": "Peak sustained throughput: the best error-free step (rate ramps: autobench's "
    "reading, the highest offered rate achieved at ≥ 95 % with no errors); with rounds, "
    "their mean and its 95 % interval (the error bar).",
    "affinity": "Peak per framework under each CPU affinity mode (the affinity study).",
    "protocols": "Peak per server on each protocol (h1 cleartext HTTP/1.1, h1-tls HTTP/1.1 "
    "over TLS 1.3, h2 HTTP/2 over TLS, h2c cleartext HTTP/2), with 95 % intervals from "
    "rounds; under each h1-tls bar its TLS tax, the ratio of its peak to the same server's "
    "h1 peak in this run.",
    "conn_cpu": "Server CPU against open connections.",
    "conn_rss": "Server memory against open connections.",
    "conn_rss_per_connection": "Memory per open connection (the WebSocket study found 10.3 KB).",
    "conn_tick_max": "Worst event-loop tick lag per step; dotted lines mark breaking points.",
}

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


def _ramp_as_run(profile: dict[str, Any]) -> str:
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


def _number(value: Any, pattern: str = "{:,.0f}") -> str:
    """A figure read from run.json (figure_text; `–` for anything but a number)."""
    return figure_text(value if isinstance(value, int | float) else None, spec=pattern)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
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
    return _table(rendered.headers, rows, numeric=rendered.numeric_indexes())


def _verdict(run: Run) -> str:
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


def _thresholds(run: Run) -> str:
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
    table = _table(["rule", "case", "value", "interval", "judged on", "result"], rows, {2, 3})
    return f"<h3>Thresholds</h3>{verdict}{table}"


def _precision(run: Run) -> str:
    """Each case measured in rounds (charts.tables.PRECISION); "" when no case ran rounds."""
    table = spec_table(PRECISION, run)
    return f"<h3>Precision</h3>{table}" if table else ""


def _verify_rows(case: Case) -> list[list[str]]:
    return [
        [
            escape(case.framework),
            escape(name),
            '<span class="ok">ok</span>' if check.get("ok") else '<span class="failed">FAIL</span>',
            escape(str(check.get("detail", ""))),
        ]
        for name, check in case.verify.items()
    ]


def _deviation_rows(run: Run) -> list[list[str]]:
    """Each case's deviations (verify's record): a warning, or declared with the reason."""
    return [
        [
            escape(case.framework),
            *(escape(str(d.get(k, ""))) for k in ("check", "key", "sent", "expected", "came")),
            '<span class="incomplete">warning</span>'
            if d.get("declared") is None
            else f"declared: {escape(str(d['declared']))}",
        ]
        for case in run.cases
        for d in case.deviations
    ]


def _ms(value: Any) -> str:
    return _number(value, "{:,.2f}")


def _knee_rows(run: Run) -> list[list[str]]:
    rows = []
    for case in run.cases:
        knee = case.summary.knee
        if case.status != "ok" or not case.steps or case.steps[0].unit != "req/s":
            continue
        top = max(s.offered for s in case.steps)
        # a knee the driver or a busy machine caused is not the server's: its flags say so
        at_knee = [s for s in case.steps if knee and s.offered == knee.get("offered")]
        rows.append(
            [
                escape(case.framework),
                _ms(knee.get("floor_p99_ms")) if knee else "–",
                _number(knee.get("last_on_floor")) if knee else "–",
                _number(knee.get("offered")) if knee else f"not reached (≤ {top:,.0f})",
                _ms(knee.get("p99_ms")) if knee else "–",
                _number(case.summary.peak),
                escape(" ".join(at_knee[0].flags)) if at_knee else "",
            ]
        )
    return rows


def _equal_load_rows(run: Run) -> list[list[str]]:
    """Every framework's latency at each offered rate all of them ran (open loop)."""
    cases = [c for c in run.cases if c.status == "ok" and c.steps and c.steps[0].unit == "req/s"]
    if len(cases) < 1 or not any(s.latency_uncorrected_ms for c in cases for s in c.steps):
        return []
    common = set.intersection(*({s.offered for s in c.steps} for c in cases))
    rows = []
    for rate in sorted(common):
        for case in cases:
            step = next(s for s in case.steps if s.offered == rate)
            latency = step.latency_ms
            raw = step.latency_uncorrected_ms or {}
            held = not step.errors["total"] and step.achieved >= 0.95 * step.offered
            rows.append(
                [
                    _number(rate),
                    escape(case.framework),
                    _number(step.achieved),
                    *(_ms(latency.get(k)) for k in ("p50", "p99", "p99.9", "p99.99", "max")),
                    _ms(raw.get("p99")),
                    _ms(raw.get("p99.9")),
                    escape(" ".join(step.flags) + ("" if held else " did not hold")),
                ]
            )
    return rows


HOST_HEADERS = (
    "framework", "step", "host", "offered", "replies / opened", "errors", "achieved",
    "p50 ms", "p99 ms", "max ms", "load CPU %", "start skew ms",
)  # fmt: skip


def _host_rows(case: Case) -> list[list[str]]:
    """A fleet run's per-host figures for each step, then the merged row ("all hosts").

    HTTP steps keep a list of host figures (harness.fleet.steps); connection steps a dict of
    each host's open, opened and failed connections. Merged percentiles are not the hosts'
    mean (wrk gives percentiles, not histograms): the merged p99 shows its upper bound, ≤.
    """
    rows = []
    for step in case.steps:
        hosts = step.figures.hosts
        if not hosts:
            continue
        label = f"{figure(step.offered)} {step.unit}"
        if isinstance(hosts, dict):  # a connection ramp's held step
            for name, counts in hosts.items():
                rows.append([escape(case.framework), label, escape(name), "–",
                             _number(counts.get("opened")), _number(counts.get("failed")),
                             _number(counts.get("open")), "–", "–", "–", "–", "–"])  # fmt: skip
            rows.append([escape(case.framework), label, "<b>all hosts</b>", "–",
                         _number(step.replies), _number(step.errors["total"]),
                         _number(step.achieved), "–", "–", "–", "–", "–"])  # fmt: skip
            continue
        for host in hosts:
            latency = host.get("latency_ms", {})
            own = host.get("errors", {}).items()
            errors = sum(n for kind, n in own if not kind.startswith("driver_"))
            rows.append([
                escape(case.framework), label, escape(str(host.get("host"))),
                _number(host.get("offered")), _number(host.get("replies")), _number(errors),
                _number(host.get("achieved")), _number(latency.get("p50"), "{:.2f}"),
                _number(latency.get("p99"), "{:.2f}"), _number(latency.get("max"), "{:.2f}"),
                _number(host.get("driver_cpu_pct"), "{:.1f}"),
                _number(host.get("start_skew_ms"), "{:.1f}"),
            ])  # fmt: skip
        bound = (step.figures.latency_upper_bound_ms or {}).get("p99")
        p99 = step.latency_ms.get("p99")
        merged_p99 = _number(p99, "{:.2f}") if p99 is not None else "≤ " + _number(bound, "{:.2f}")
        rows.append([
            escape(case.framework), label, "<b>all hosts</b>", figure(step.offered),
            _number(step.replies), _number(step.errors["total"]), _number(step.achieved),
            _number(step.latency_ms.get("p50"), "{:.2f}"), merged_p99,
            _number(step.latency_ms.get("max"), "{:.2f}"),
            _number(step.agent_cpu_pct, "{:.1f}"),
            _number(step.figures.start_skew_ms_max, "{:.1f}"),
        ])  # fmt: skip
    return rows


def _image(path: Path) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{encoded}">'


def _status(run: Run) -> str:
    """How the run ended, in bold unless complete: a partial run must not look finished."""
    if run.status == "complete":
        return "status: complete"
    what = {
        "running": "running — or its harness was killed before it could write an end",
        "unknown": "unknown",
    }.get(run.status, run.status)
    reason = f" ({escape(run.status_reason)})" if run.status_reason else ""
    return f"status: <b class='failed'>{escape(what)}</b>{reason}: the figures cover part of it"


def nav_html(links: Sequence[tuple[str, str]]) -> str:
    """A line of links (label, relative URL) above a page's title; "" without links."""
    if not links:
        return ""
    items = " · ".join(f'<a href="{escape(url)}">{escape(label)}</a>' for label, url in links)
    return f'<nav class="links">{items}</nav>'


def render_html(
    runs: Sequence[Run],
    images: dict[str, Path],
    links: Sequence[tuple[str, str]] = (),
    flames: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The report page; `links` (label, relative URL): a line of links above the title
    (harness publish's way back to its index)."""
    title = "Server comparison — " + ", ".join(run.run_id for run in runs)
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>",
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{STYLE}</style></head><body>{nav_html(links)}<h1>{escape(title)}</h1>",
    ]
    for run in runs:
        profile = run.config.get("profile", {})
        parts.append(f"<h2>Run {escape(run.run_id)}</h2>")
        parts.append(_verdict(run))
        parts.append(
            f"<p>{escape(str(profile.get('name', '')))}: "
            f"{escape(str(profile.get('description', '')))}<br>{_ramp_as_run(profile)}"
            f"started {escape(run.started)}, "
            f"finished {escape(str(run.finished))}; "
            + escape(
                pinning_text(
                    str(profile.get("affinity", "both")),
                    run.config.get("server_cpus"),
                    run.config.get("agent_cpus"),
                )
            )
            + f"<br>{_status(run)}</p>"
        )
        parts.append("<h3>Summary</h3>")
        parts.append(spec_table(SUMMARY, run))
        parts.append(cpu_profile_html(run, html_table, flames or {}))
        parts.append(_thresholds(run))
        parts.append(_precision(run))
        tls = spec_table(TLS, run)
        if tls:
            parts.append("<h3>Protocols</h3>")
            parts.append(
                "<p>What each server negotiated with the harness's probe connection right "
                "after it started (Python <code>ssl</code>, trusting the run's CA). The TLS "
                "tax is an h1-tls peak over the same server's h1 peak in this run, with its "
                "95 % interval when both ran rounds (paired round by round).</p>"
            )
            parts.append(tls)
        connections = spec_table(MEMORY, run)
        if connections:
            parts.append("<h3>Connections</h3>")
            parts.append(
                "<p>Each connection ramp's top held step, where it broke (and the limit that "
                "stopped it), and its memory per connection: the server's cgroup (its RSS "
                "without one), the agents' RSS, the kernel's slab (both ends of each "
                "connection on this box) and the whole host's available memory, each the "
                "slope over the held steps; and what the host had left at the top step.</p>"
            )
            parts.append(connections)
        closing = spec_table(CLOSING, run)
        if closing:
            parts.append("<h3>Close storm</h3>")
            parts.append("<p>Every connection closed at once at the ramp's end.</p>")
            parts.append(closing)
        knees = _knee_rows(run)
        if knees and any(case.summary.knee is not None for case in run.cases):
            parts.append("<h3>Knees</h3>")
            parts.append(
                _table(
                    [
                        "framework",
                        "p99 floor (ms)",
                        "last rate on the floor",
                        "knee (req/s)",
                        "p99 at the knee (ms)",
                        "peak req/s",
                        "flags at the knee",
                    ],
                    knees,
                    numeric={1, 2, 3, 4, 5},
                )
            )
        equal = _equal_load_rows(run)
        if equal:
            parts.append("<h3>Latency at equal load (open loop, ms)</h3>")
            parts.append(
                "<p>From each request's intended send (corrected for coordinated omission) "
                "and, for p99 and p99.9, from its actual send (uncorrected).</p>"
            )
            parts.append(
                _table(
                    [
                        "offered req/s",
                        "framework",
                        "achieved",
                        "p50",
                        "p99",
                        "p99.9",
                        "p99.99",
                        "max",
                        "p99 uncorrected",
                        "p99.9 uncorrected",
                        "flags",
                    ],
                    equal,
                    numeric=set(range(2, 10)) | {0},
                )
            )
    parts.append("<h2>Figures</h2>")
    for name, path in images.items():
        caption = FIGURE_CAPTIONS.get(name, name)
        parts.append(f"<figure>{_image(path)}<figcaption>{escape(caption)}</figcaption></figure>")
    parts.append("<h2>Flags</h2>")
    parts.append(
        _table(
            ["flag", "meaning"], [[escape(f), escape(m)] for f, m in FLAG_MEANINGS.items()], set()
        )
    )
    for run in runs:
        host_rows = [row for case in run.cases for row in _host_rows(case)]
        if host_rows:
            fleet = run.config.get("fleet", {})
            parts.append(f"<h2>Load hosts — {escape(run.run_id)}</h2>")
            parts.append(
                f"<p>The load came from {len(fleet.get('hosts', []))} hosts of the fleet "
                f"{escape(str(fleet.get('spec', '')))}; servers listened on "
                f"{escape(str(fleet.get('server_address', '')))}. Each step: every host's own "
                "figures, then the merged ones (counts summed exactly; a merged percentile is "
                "not the hosts' mean: ≤ marks its upper bound, the largest host's).</p>"
            )
            parts.append(_table(HOST_HEADERS, host_rows, numeric=set(range(3, 12))))
        deviations = _deviation_rows(run)
        if deviations:
            parts.append(f"<h2>Deviations — {escape(run.run_id)}</h2>")
            parts.append(
                "<p>Robustness rules a server bent while answering what it is measured on "
                "rightly: it was measured. A <b>warning</b> is one the server does not "
                "declare (<code>--strict-verify</code> fails it); a declared one gives the "
                "server's reason.</p>"
            )
            parts.append(
                _table(
                    ["framework", "check", "key", "sent", "expected", "came", "status"],
                    deviations,
                    set(),
                )
            )
        verify_rows = [row for case in run.cases for row in _verify_rows(case)]
        if verify_rows:
            parts.append(f"<h2>Verify — {escape(run.run_id)}</h2>")
            parts.append(_table(["framework", "check", "result", "detail"], verify_rows, set()))
        reconciled = [c for c in run.cases if c.reconcile]
        if reconciled:
            parts.append(f"<h2>Nothing lost — {escape(run.run_id)}</h2>")
            parts.append(
                _table(
                    ["framework", "sink", "sent", "stored", "lost", "duplicates", "unparseable"],
                    [
                        [
                            escape(c.framework),
                            escape(c.sink),
                            *(_number((c.reconcile or {}).get(k)) for k in REPORTED_RECONCILE),
                        ]
                        for c in reconciled
                    ],
                    numeric={2, 3, 4, 5, 6},
                )
            )
        parts.append(f"<h2>Host and versions — {escape(run.run_id)}</h2>")
        parts.append(
            _table(
                ["fact", "value"], [[escape(k), escape(str(v))] for k, v in run.host.items()], set()
            )
        )
        parts.append(f"<pre>{escape(json.dumps(run.versions, indent=2))}</pre>")
        parts.append("<h3>Configuration</h3>")
        parts.append(f"<pre>{escape(json.dumps(run.config.get('profile', {}), indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    runs: Sequence[Run],
    images: dict[str, Path],
    path: Path,
    links: Sequence[tuple[str, str]] = (),
    flames: Mapping[tuple[str, str], str] | None = None,
) -> Path:
    """Write the report page to `path` (with `links` above its title, and the profiled
    cases' `flames` by run id and case key); returns `path`."""
    path.write_text(render_html(runs, images, links, flames))
    return path

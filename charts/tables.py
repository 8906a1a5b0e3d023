"""The run's tables, each defined once as columns over its cases (charts.columns), and
the verdict in words: compare's console, report.html, the Markdown and the JUnit outputs
render these, so they show the same columns and the same sentence. No harness here
(charts draw the model only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from charts.columns import Cell, Column, Style, TableSpec, Tone, figure_cell, figure_text
from model.figures import figure
from model.results import Case, Run, has_protocol_axis
from model.scenarios import is_delay


def _any(read: Any) -> Any:
    """A `shown` rule: the column appears when any case has a value for it."""
    return lambda cases: any(read(c) is not None for c in cases)


def _name(case: Case, style: Style) -> str:
    """The framework, a baseline marked: `nginx*` in the terminal, `nginx (baseline)` in files."""
    if case.summary.role != "baseline":
        return case.framework
    return case.framework + ("*" if style == "compact" else " (baseline)")


def _measured(case: Case) -> bool:
    return case.status == "ok"


def resumed_at_peak(case: Case) -> float | None:
    """The handshakes profile's resumed handshakes per second in the peak step (its
    figure is the full handshakes; drivers.handshakes, resumption "both")."""
    peak = next((s for s in case.steps if s.offered == case.summary.peak_offered), None)
    return peak.figures.resumed_per_s if peak is not None else None


def _status(case: Case, style: Style) -> Cell:
    """The status, toned: failed red, skipped or a step lost yellow, ok green."""
    tone: Tone = "ok"
    if case.status == "failed":
        tone = "failed"
    elif case.status == "skipped" or case.lost_steps:
        tone = "warn"
    return Cell(case.status_text, tone=tone)


def _ratio(value: float | None, pair: Any, style: Style) -> Cell:
    return figure_cell(value, pair, style, spec="{:.2f}", suffix="×")


def _cpu_cost(case: Case, style: Style) -> Cell:
    """CPU µs per reply with its interval; in files also its ratio to nginx's."""
    s = case.summary
    cell = figure_cell(s.cpu_us_per_req, s.cpu_us_per_req_ci, style, spec="{:,.1f}")
    if style == "bracketed" and s.cpu_ratio_to_nginx is not None:
        return Cell(cell.text, f"{cell.interval} ({s.cpu_ratio_to_nginx:.2f}× nginx)".strip())
    return cell


def _flags(case: Case) -> str:
    deviations = case.warnings
    said = [f"{deviations} deviation{'s' if deviations > 1 else ''}"] if deviations else []
    return " ".join([*case.summary.flags, *said])


def _column(
    header: str, cell: Any, *, shown: Any = None, numeric: bool = True, unit: Any = None
) -> Column[Case]:
    """A column whose cell is computed from the whole case (value: the case itself)."""
    return Column(
        header,
        value=lambda case: case,
        format=lambda case, style: cell(case, style),
        shown=shown or (lambda cases: True),
        numeric=numeric,
        unit=unit,
    )


def _varies(read: Any) -> Any:
    return lambda cases: len({read(c) for c in cases}) > 1


SUMMARY = TableSpec[Case](
    title="summary",
    columns=(
        _column("framework", _name, numeric=False),
        _column(
            "process model",
            lambda c, _: c.process_model,
            shown=_varies(lambda c: c.process_model),
            numeric=False,
        ),
        _column("protocol", lambda c, _: c.protocol, shown=has_protocol_axis, numeric=False),
        _column(
            "affinity",
            lambda c, _: c.affinity.get("mode") or "",
            shown=_varies(lambda c: c.affinity.get("mode")),
            numeric=False,
        ),
        _column(
            "status",
            _status,
            shown=lambda cases: any(c.status_text != "ok" for c in cases),
            numeric=False,
        ),
        _column(
            "peak",
            lambda c, style: figure_cell(c.summary.peak, c.summary.peak_ci, style),
            unit=lambda c: c.summary.peak_unit if c.summary.peak is not None else None,
        ),
        _column(
            "vs nginx",
            lambda c, style: _ratio(c.summary.ratio_to_nginx, c.summary.ratio_to_nginx_ci, style),
            shown=_any(lambda c: c.summary.ratio_to_nginx),
        ),
        _column(
            "TLS tax",
            lambda c, style: _ratio(c.summary.tls_tax, c.summary.tls_tax_ci, style),
            shown=_any(lambda c: c.summary.tls_tax),
        ),
        _column(
            "resumed /s",
            lambda c, style: figure_text(resumed_at_peak(c)),
            shown=_any(resumed_at_peak),
        ),
        _column(
            "MB/s",
            lambda c, style: figure_text(c.summary.megabytes_per_s_at_peak, spec="{:,.1f}"),
            shown=_any(lambda c: c.summary.megabytes_per_s_at_peak),
        ),
        _column(
            "at",
            lambda c, _: figure(c.summary.peak_offered),
            unit=lambda c: c.steps[0].unit if c.steps and c.summary.peak_offered else None,
        ),
        _column(
            "p99 ms",
            lambda c, style: figure_cell(
                c.summary.p99_at_peak_ms, c.summary.p99_at_peak_ci_ms, style, spec="{:,.2f}"
            ),
        ),
        _column("CPU %", lambda c, _: figure_text(c.summary.server_cpu_at_peak_pct, spec="{:.0f}")),
        _column("CPU µs/req", _cpu_cost, shown=_any(lambda c: c.summary.cpu_us_per_req)),
        _column(
            "RSS MB",
            lambda c, _: figure_text(
                c.summary.rss_max_bytes / 1e6 if c.summary.rss_max_bytes else None, spec="{:,.1f}"
            ),
        ),
        _column("errors", lambda c, _: f"{c.summary.errors_total:,}"),
        Column(
            "flags", value=_flags, shown=lambda cases: any(_flags(c) for c in cases), wraps=True
        ),
        Column(
            "reason",
            value=lambda c: c.error or "",
            # the terminal prints each failure whole beneath its table
            format=lambda error, style: "(below)" if error and style == "compact" else error,
            shown=lambda cases: any(c.error for c in cases),
            wraps=True,
        ),
    ),
)
# the columns every run's summary has, whatever it measured
SUMMARY_ALWAYS = ("framework", "peak", "at", "p99 ms", "CPU %", "RSS MB", "errors")


def _precision_state(case: Case, style: Style) -> Cell:
    s = case.summary
    if s.precision_pct is None:
        return Cell("–")
    if s.imprecise_reason is not None:
        return Cell(f"imprecise: {s.imprecise_reason}", tone="failed")
    return Cell(f"within ±{s.precision_pct:g} %", tone="ok")


def _kept_out(case: Case, style: Style) -> str:
    """How many rounds were kept out (the terminal; it lists why beneath the table), or
    each with its reason (files)."""
    excluded = case.summary.rounds_excluded
    if style == "compact":
        return str(len(excluded))
    return "; ".join(f"round {e['round'] + 1}: {e['reason']}" for e in excluded)


def case_words(case: Case) -> str:
    """A case in the words tables use: framework, protocol, process model, affinity."""
    parts = (case.framework, case.protocol, case.process_model, case.affinity.get("mode"))
    return " ".join(part for part in parts if part)


PRECISION = TableSpec[Case](
    title="precision",
    rows=lambda cases: [c for c in cases if _measured(c) and c.summary.rounds],
    columns=(
        _column("case", lambda c, _: case_words(c), numeric=False),
        _column("rounds", lambda c, _: str(c.summary.rounds)),
        _column("round s", lambda c, _: figure_text(c.summary.round_duration_s, spec="{:g}")),
        _column("± % of peak", lambda c, _: figure_text(c.summary.half_width_pct, spec="±{:.1f}")),
        _column("precision", _precision_state, numeric=False),
        _column("noise", lambda c, _: c.summary.noise_note or "", numeric=False),
        _column("kept out", _kept_out, numeric=False),
    ),
)

_TRUSTED = {True: "yes (the run's CA)", False: "no (it cannot be told a CA)", None: "–"}

TLS = TableSpec[Case](
    title="protocols: what each server negotiated, and its TLS tax",
    rows=lambda cases: [c for c in cases if c.negotiated is not None],
    columns=(
        _column("framework", lambda c, _: c.framework, numeric=False),
        _column("protocol", lambda c, _: c.protocol, numeric=False),
        _column("TLS version", lambda c, _: c.negotiated.tls_version or "–", numeric=False),
        _column("cipher", lambda c, _: c.negotiated.cipher or "–", numeric=False),
        _column("key", lambda c, _: c.negotiated.key_type or "–", numeric=False),
        _column("ALPN", lambda c, _: c.negotiated.alpn or "none", numeric=False),
        _column(
            "load generator verified the certificate",
            lambda c, _: _TRUSTED[c.negotiated.ca_trusted],
            numeric=False,
        ),
        _column("TLS tax", lambda c, style: _ratio(c.summary.tls_tax, c.summary.tls_tax_ci, style)),
    ),
)


def _per_kb(*keys: str) -> Any:
    """A connection case's memory per connection, the first of `keys` it has."""

    def read(case: Case, style: Style) -> str:
        per = (case.summary.memory_breakdown or {}).get("kb_per_connection") or {}
        return figure(next((per[k] for k in keys if per.get(k) is not None), None))

    return read


def _breaking(case: Case, style: Style) -> str:
    breaking = case.summary.breaking_point
    if breaking is None:
        return "–"
    return f"{breaking['connections']:,}: {breaking.get('limit') or breaking['reason']}"


def _host_left_gib(case: Case, style: Style) -> str:
    left = (case.summary.memory_breakdown or {}).get("host_available_bytes")
    return figure(left / 2**30 if left is not None else None)


def _framework_of(case: Case, style: Style) -> str:
    return case.framework + (" (baseline)" if case.summary.role == "baseline" else "")


MEMORY = TableSpec[Case](
    title="connections: where each server stopped and where its memory went",
    # each connection case's top held step, where it broke (and the limit, when one
    # stopped it), and where the memory went per connection (`summary.memory_breakdown`:
    # the server's cgroup, or its RSS without one; the agents; the kernel's slab, both
    # ends; the whole host) with what the host had left
    rows=lambda cases: [
        c
        for c in cases
        if c.summary.memory_breakdown is not None or c.summary.breaking_point is not None
    ],
    columns=(
        _column("server", _framework_of, numeric=False),
        _column(
            "held",
            lambda c, _: figure((c.summary.memory_breakdown or {}).get("connections")),
        ),
        _column("breaking point", _breaking, numeric=False),
        _column("server KB/conn", _per_kb("server_cgroup", "server_rss")),
        _column("agents KB/conn", _per_kb("agents_rss")),
        _column("kernel KB/conn", _per_kb("kernel_slab")),
        _column("host KB/conn", _per_kb("host")),
        _column("host GiB left", _host_left_gib),
    ),
)


def _closing(key: str) -> Any:
    return lambda case, style: figure((case.summary.closing or {}).get(key))


CLOSING = TableSpec[Case](
    title="close storm: every connection closed at once at the ramp's end",
    # each connection case's closing step (`summary.closing`): how its connections were
    # closed, how many, the server's worst and mean tick while it closed them, how long
    # that took and what it still held after, and its collector's pauses in the step
    rows=lambda cases: [c for c in cases if c.summary.closing is not None],
    columns=(
        _column("server", _framework_of, numeric=False),
        _column("close", lambda c, _: str(c.summary.closing["close"]), numeric=False),
        _column("connections", _closing("connections")),
        _column("tick max ms", _closing("tick_max_ms")),
        _column("tick avg ms", _closing("tick_avg_ms")),
        _column("closed in s", _closing("close_s")),
        _column("open after", _closing("open_after")),
        _column(
            "GC ms (collections)",
            lambda c, _: (
                f"{figure(c.summary.closing.get('gc_pause_ms'))} "
                f"({c.summary.closing.get('gc_collections', 0)})"
            ),
        ),
    ),
)


def _held(key: str) -> Any:
    return lambda case, style: figure((case.summary.held_in_flight or {}).get(key))


HELD = TableSpec[Case](
    title="delay: requests held in flight at p99 ≤ 2 × the delay",
    # each delay case measured: the highest step whose p99 stayed within twice the wait
    # (`summary.held_in_flight`, harness.run.delay), its p99 and req/s; `none held` when
    # no step did
    rows=lambda cases: [c for c in cases if c.status == "ok" and is_delay(c.scenario)],
    columns=(
        _column("server", _framework_of, numeric=False),
        _column(
            "held in flight",
            lambda c, _: (
                figure(c.summary.held_in_flight["concurrency"])
                if c.summary.held_in_flight
                else "none held"
            ),
        ),
        _column("p99 ms", _held("p99_ms")),
        _column("p99 limit ms", _held("limit_ms")),
        _column("req/s there", _held("req_s")),
    ),
)

# every table of a run, in the order the outputs give them (the report adds its own)
RUN_TABLES: tuple[TableSpec[Case], ...] = (SUMMARY, PRECISION, TLS, MEMORY, CLOSING, HELD)


@dataclass(frozen=True)
class VerdictLine:
    """One comparable set's verdict: `where` (the set, when a run has several; else ""),
    the `sentence` (`nginx > eventmachine ≈ node-http (…)`) and each neighbour pair's
    ratio with its interval, ties said (`aiohttp / twisted = 1.02× [0.97, 1.08] (a tie)`)."""

    where: str
    sentence: str
    ratios: tuple[str, ...]

    @property
    def head(self) -> str:
        """Where (when said) and the sentence: `text, wrk: nginx > aiohttp (…)`."""
        return f"{self.where}: {self.sentence}" if self.where else self.sentence

    def text(self) -> str:
        """The line as plain text: the head, then each ratio, `; ` between."""
        return "; ".join([self.head, *self.ratios])


VERDICT_TITLE = "Verdict (95 % intervals)"
_SET_KEYS = ("scenario", "driver", "sink", "affinity", "process_model", "protocol")


def verdict_lines(verdict: dict[str, Any] | None) -> list[VerdictLine]:
    """The run's verdict in words (Run.verdict, written by harness.run.verdict), one line
    per comparable set; [] for a run without one. The terminal, the Markdown and the
    report all say it with this."""
    if not verdict or not verdict.get("sets"):
        return []
    sets = verdict["sets"]
    lines = []
    for part in sets:
        where = ", ".join(str(part[k]) for k in _SET_KEYS if k in part) if len(sets) > 1 else ""
        ratios = tuple(
            f"{r['a']} / {r['b']} = {figure_text(r['ratio'], r['ci'], spec='{:.2f}', suffix='×')}"
            + ("" if r.get("separated") else " (a tie)")
            for r in part.get("ratios", ())
            if r.get("ratio") is not None and r.get("ci")
        )
        lines.append(VerdictLine(where, str(part["text"]), ratios))
    return lines


def pinning_text(affinity: str, server_cpus: object, load_cpus: object) -> str:
    """Where a run pinned its server and its load (`--affinity`), in one phrase: "server
    CPUs 0, load CPUs 1" when both were pinned; "no CPU pinning (affinity none)" rather than
    CPU lists the run never applied."""
    if affinity == "none":
        return "no CPU pinning (affinity none)"
    if affinity == "server":
        return f"server CPUs {server_cpus}, load unpinned (affinity server)"
    if affinity == "agent":
        return f"server unpinned, load CPUs {load_cpus} (affinity agent)"
    if affinity == "matrix":
        return f"affinity matrix: server CPUs {server_cpus}, load CPUs {load_cpus} where pinned"
    return f"server CPUs {server_cpus}, load CPUs {load_cpus}"


def run_status_line(run: Run) -> str:
    """`complete`, `interrupted: stopped by SIGTERM`, `failed: <why>`; a run.json still
    `running` after its harness is gone was killed before it could say so."""
    if run.status == "running":
        return "running (or its harness was killed before it could write an end)"
    return f"{run.status}: {run.status_reason}" if run.status_reason else run.status


def summary_headers(cases: Sequence[Case]) -> list[str]:
    """The summary columns a run of these cases shows (every output shows these)."""
    return list(SUMMARY.render(cases, "bracketed").headers)

"""The rows of report.html's tables that are not in the column model (charts.tables): each
row a list of cells already in HTML (charts.page.table). Knees and latency at equal load
for open-loop rate ramps; a fleet run's figures per load host; verify's checks and the
deviations it recorded."""

from __future__ import annotations

from html import escape

from charts.page import ms, number
from model.figures import figure
from model.results import Case, Run

KNEE_HEADERS = (
    "framework",
    "p99 floor (ms)",
    "last rate on the floor",
    "knee (req/s)",
    "p99 at the knee (ms)",
    "peak req/s",
    "flags at the knee",
)
EQUAL_LOAD_HEADERS = (
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
)
HOST_HEADERS = (
    "framework", "step", "host", "offered", "replies / opened", "errors", "achieved",
    "p50 ms", "p99 ms", "max ms", "load CPU %", "start skew ms",
)  # fmt: skip


def knee_rows(run: Run) -> list[list[str]]:
    """Each open-loop case's knee: its p99 floor, the last rate on it, the knee and its
    p99, the peak, and the flags of the step at the knee ("not reached" below the top)."""
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
                ms(knee.get("floor_p99_ms")) if knee else "–",
                number(knee.get("last_on_floor")) if knee else "–",
                number(knee.get("offered")) if knee else f"not reached (≤ {top:,.0f})",
                ms(knee.get("p99_ms")) if knee else "–",
                number(case.summary.peak),
                escape(" ".join(at_knee[0].flags)) if at_knee else "",
            ]
        )
    return rows


def equal_load_rows(run: Run) -> list[list[str]]:
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
                    number(rate),
                    escape(case.framework),
                    number(step.achieved),
                    *(ms(latency.get(k)) for k in ("p50", "p99", "p99.9", "p99.99", "max")),
                    ms(raw.get("p99")),
                    ms(raw.get("p99.9")),
                    escape(" ".join(step.flags) + ("" if held else " did not hold")),
                ]
            )
    return rows


def host_rows(case: Case) -> list[list[str]]:
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
                             number(counts.get("opened")), number(counts.get("failed")),
                             number(counts.get("open")), "–", "–", "–", "–", "–"])  # fmt: skip
            rows.append([escape(case.framework), label, "<b>all hosts</b>", "–",
                         number(step.replies), number(step.errors["total"]),
                         number(step.achieved), "–", "–", "–", "–", "–"])  # fmt: skip
            continue
        for host in hosts:
            latency = host.get("latency_ms", {})
            own = host.get("errors", {}).items()
            errors = sum(n for kind, n in own if not kind.startswith("driver_"))
            rows.append([
                escape(case.framework), label, escape(str(host.get("host"))),
                number(host.get("offered")), number(host.get("replies")), number(errors),
                number(host.get("achieved")), number(latency.get("p50"), "{:.2f}"),
                number(latency.get("p99"), "{:.2f}"), number(latency.get("max"), "{:.2f}"),
                number(host.get("driver_cpu_pct"), "{:.1f}"),
                number(host.get("start_skew_ms"), "{:.1f}"),
            ])  # fmt: skip
        bound = (step.figures.latency_upper_bound_ms or {}).get("p99")
        p99 = step.latency_ms.get("p99")
        merged_p99 = number(p99, "{:.2f}") if p99 is not None else "≤ " + number(bound, "{:.2f}")
        rows.append([
            escape(case.framework), label, "<b>all hosts</b>", figure(step.offered),
            number(step.replies), number(step.errors["total"]), number(step.achieved),
            number(step.latency_ms.get("p50"), "{:.2f}"), merged_p99,
            number(step.latency_ms.get("max"), "{:.2f}"),
            number(step.agent_cpu_pct, "{:.1f}"),
            number(step.figures.start_skew_ms_max, "{:.1f}"),
        ])  # fmt: skip
    return rows


def verify_rows(case: Case) -> list[list[str]]:
    """Each of verify's checks on the case: its name, ok or FAIL, and its detail."""
    return [
        [
            escape(case.framework),
            escape(name),
            '<span class="ok">ok</span>' if check.get("ok") else '<span class="failed">FAIL</span>',
            escape(str(check.get("detail", ""))),
        ]
        for name, check in case.verify.items()
    ]


def deviation_rows(run: Run) -> list[list[str]]:
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

"""`report.html`: one self-contained page (images embedded) that opens from disk offline.

The page is its parts joined by newlines: a head, each run's results
(charts.report_sections), the figures with their captions, what each flag means, then how
each run was made (charts.report_appendix). The HTML pieces every page shares are in
charts.page, and stay importable from here (STYLE, html_table, spec_table, nav_html).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from charts.page import STYLE, TONE_CLASSES, html_table, image, nav_html, spec_table, table
from charts.report_appendix import REPORTED_RECONCILE, appendix_sections
from charts.report_sections import run_sections
from model.results import FLAG_MEANINGS, Run

__all__ = [
    "FIGURE_CAPTIONS",
    "REPORTED_RECONCILE",
    "STYLE",
    "TONE_CLASSES",
    "html_table",
    "nav_html",
    "render_html",
    "spec_table",
    "write_report",
]

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
    "attacks": "The h2-attacks profile: per attack, the goodput each server's well-behaved "
    "clients kept in rounds with one attacking connection over the rounds beside them "
    "without (1.0, dashed: the attack cost nothing); error bars: the 95 % interval over the "
    "round pairs.",
    "attack_p99": "The h2-attacks profile: per attack, each server's well-behaved clients' "
    "p99 in the rounds without the attack (pale, hatched) and with one attacking connection "
    "(solid), each the median over the rounds; above each pair the ratio with / without.",
    "attack_peak": "The h2-attacks profile: each server's closed-loop peak round (h2load, "
    "the profile's requests in flight), whose fraction paces the rounds with and without "
    "an attack; above each bar the rate they ran at. The rounds themselves are no ramp, "
    "so no figure draws them against a load.",
    "conn_cpu": "Server CPU against open connections.",
    "conn_rss": "Server memory against open connections.",
    "conn_rss_per_connection": "Memory per open connection (the WebSocket study found 10.3 KB).",
    "conn_tick_max": "Worst event-loop tick lag per step; dotted lines mark breaking points.",
}


def render_html(
    runs: Sequence[Run],
    images: dict[str, Path],
    links: Sequence[tuple[str, str]] = (),
    flames: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The report page; `links` (label, relative URL): a line of links above the title
    (harness publish's way back to its index)."""
    parts = head_parts(runs, links)
    for run in runs:
        parts += run_sections(run, flames or {})
    parts += figures_section(images)
    parts += flags_section()
    for run in runs:
        parts += appendix_sections(run)
    parts.append("</body></html>")
    return "\n".join(parts)


def head_parts(runs: Sequence[Run], links: Sequence[tuple[str, str]]) -> list[str]:
    """The page's head (its title names every run, the stylesheet inline) and the top of
    its body: the links, then the title again as its heading."""
    title = "Server comparison — " + ", ".join(run.run_id for run in runs)
    return [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>",
        f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{STYLE}</style></head><body>{nav_html(links)}<h1>{escape(title)}</h1>",
    ]


def figures_section(images: dict[str, Path]) -> list[str]:
    """Every figure embedded, in the order given, each with its caption (FIGURE_CAPTIONS;
    its name when it has none)."""
    parts = ["<h2>Figures</h2>"]
    for name, path in images.items():
        caption = FIGURE_CAPTIONS.get(name, name)
        parts.append(f"<figure>{image(path)}<figcaption>{escape(caption)}</figcaption></figure>")
    return parts


def flags_section() -> list[str]:
    """What each step flag means (model.results.FLAG_MEANINGS)."""
    meanings = [[escape(f), escape(m)] for f, m in FLAG_MEANINGS.items()]
    return ["<h2>Flags</h2>", table(["flag", "meaning"], meanings, set())]


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

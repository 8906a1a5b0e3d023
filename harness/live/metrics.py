"""The run's samples as Prometheus metrics (`--prometheus`): a collector read at each scrape.

Nothing is computed between scrapes: `RunCollector.collect` copies the live state
(harness.live.state) and turns it into metric families. The registry is the run's own,
never prometheus_client's global one (whose process and platform collectors would add
series the harness does not mean to publish).

Labels: `framework`, `protocol` and `case` (the case's label as the console shows it,
unique in a run); `step` (the ramp step's index) where a figure belongs to one step.
Gauges describe the case running and vanish when it ends; counters stay for every case.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder

from harness.live.state import CaseLabel, LiveState

CASE_LABELS = ("framework", "protocol", "case")

# every metric the exporter publishes, with what it means (docs/live.md lists these)
METRICS: dict[str, str] = {
    "harness_run": "The run: its id and profile (always 1).",
    "harness_cases": "Cases the run plans (more when confirmation rounds are added).",
    "harness_cases_finished": "Cases finished, by status (ok, failed, skipped).",
    "harness_step": "The step running: index, offered load and its unit (always 1).",
    "harness_step_seconds_left": "Seconds left in the step running (its planned length).",
    "harness_run_seconds_left": "Seconds left in the run, estimated from the finished cases.",
    "harness_replies_per_second": "Requests the server answered in the last second "
    "(its own count; servers without telemetry have none).",
    "harness_open_connections": "Connections the server holds open now.",
    "harness_server_cpu_ratio": "The server's CPU over the last second, in cores (1.0: one).",
    "harness_server_rss_bytes": "The server's resident memory, every process summed.",
    "harness_tick_lag_seconds": "The server's worst event-loop tick in the last second.",
    "harness_step_achieved": "The last finished step's achieved load (req/s, or connections).",
    "harness_step_latency_seconds": "The last finished step's latency quantiles (the driver's).",
    "harness_replies": "Replies the load generator received over the case's finished steps.",
    "harness_server_requests": "Requests the server counted itself (telemetry), so far.",
    "harness_errors": "Errors over the case's finished steps, by kind.",
    "harness_flags": "Step flags raised so far, by flag (driver_bound, noisy, ...).",
    "harness_bench_rounds": "A bench's rounds done so far (ours and minimal each ran once).",
    "harness_bench_rounds_max": "A bench's rounds at most (its --max-rounds; bench ws: --rounds).",
    "harness_bench_figure": "A bench's figure in its last round, by app (ours or minimal).",
    "harness_bench_ratio": "A bench's ratio ours / minimal so far, with its 95 % interval "
    "(bound: estimate, low, high).",
}
BENCH_LABELS = ("framework", "protocol", "figure")


def _case_values(label: CaseLabel) -> list[str]:
    return [label.framework, label.protocol, label.text]


class RunCollector:
    """A prometheus_client collector over a LiveState (registered in the run's registry)."""

    def __init__(self, state: LiveState) -> None:
        self.state = state

    def describe(self) -> list[Metric]:
        """Nothing described ahead: the registry then does not collect at registration."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The metric families of the run as it stands."""
        view = self.state.metric_view()
        yield from run_families(view)
        yield from running_families(view)
        yield from counter_families(view)
        yield from bench_families(view)


def run_families(view: dict[str, Any]) -> Iterator[Metric]:
    """The run's info, its planned cases and its finished ones by status."""
    info = InfoMetricFamily("harness_run", METRICS["harness_run"], labels=["run_id", "profile"])
    info.add_metric([view["run_id"], view["profile"]], {"status": view["status"]})
    yield info
    yield GaugeMetricFamily("harness_cases", METRICS["harness_cases"], value=view["cases_total"])
    finished = CounterMetricFamily(
        "harness_cases_finished", METRICS["harness_cases_finished"], labels=["status"]
    )
    by_status: dict[str, int] = {"ok": 0, "failed": 0, "skipped": 0}
    for case in view["cases"]:
        if case["status"] in by_status:
            by_status[case["status"]] += 1
    for status, count in by_status.items():
        finished.add_metric([status], count)
    yield finished
    for name, seconds in (
        ("harness_run_seconds_left", view["time_left"]["run_s"]),
        ("harness_step_seconds_left", view["time_left"]["step_s"]),
    ):
        if seconds is not None:
            yield GaugeMetricFamily(name, METRICS[name], value=round(seconds, 1))


def running_families(view: dict[str, Any]) -> Iterator[Metric]:
    """The case running: its step, and the monitor's newest second."""
    running = view["running"]
    if running is None:
        return
    labels = _case_values(running["label"])
    step = running["step"]
    if step is not None:
        info = InfoMetricFamily(
            "harness_step", METRICS["harness_step"], labels=[*CASE_LABELS, "step"]
        )
        info.add_metric(
            [*labels, str(step["index"])], {"offered": f"{step['offered']:g}", "unit": step["unit"]}
        )
        yield info
    row = running["row"]
    step_label = str(step["index"]) if step is not None else ""
    per_second = GaugeMetricFamily(
        "harness_replies_per_second",
        METRICS["harness_replies_per_second"],
        labels=[*CASE_LABELS, "step"],
    )
    if isinstance(row.get("requests_per_s"), int | float):
        per_second.add_metric([*labels, step_label], row["requests_per_s"])
    yield per_second
    for name, key, scale in (
        ("harness_open_connections", "open", 1.0),
        ("harness_server_cpu_ratio", "server_cpu_pct", 0.01),
        ("harness_server_rss_bytes", "server_rss_bytes", 1.0),
        ("harness_tick_lag_seconds", "tick_max_ms", 0.001),
    ):
        family = GaugeMetricFamily(name, METRICS[name], labels=list(CASE_LABELS))
        value = row.get(key)
        if isinstance(value, int | float):
            family.add_metric(labels, value * scale)
        yield family


def counter_families(view: dict[str, Any]) -> Iterator[Metric]:
    """Every case's counters, and the last finished step's figures of each."""
    replies = CounterMetricFamily(
        "harness_replies", METRICS["harness_replies"], labels=list(CASE_LABELS)
    )
    served = CounterMetricFamily(
        "harness_server_requests", METRICS["harness_server_requests"], labels=list(CASE_LABELS)
    )
    errors = CounterMetricFamily(
        "harness_errors", METRICS["harness_errors"], labels=[*CASE_LABELS, "kind"]
    )
    achieved = GaugeMetricFamily(
        "harness_step_achieved", METRICS["harness_step_achieved"], labels=[*CASE_LABELS, "step"]
    )
    latency = GaugeMetricFamily(
        "harness_step_latency_seconds",
        METRICS["harness_step_latency_seconds"],
        labels=[*CASE_LABELS, "step", "quantile"],
    )
    for case in view["cases"]:
        labels = _case_values(case["label"])
        replies.add_metric(labels, case["replies_total"])
        served.add_metric(labels, case["server_requests_total"])
        for kind, count in sorted(case["errors_total"].items()):
            errors.add_metric([*labels, kind], count)
        last = case["last_step"]
        if last is not None:
            achieved.add_metric([*labels, str(last["index"])], last["achieved"])
            for quantile, key in (("0.5", "p50_ms"), ("0.99", "p99_ms")):
                if last.get(key) is not None:
                    latency.add_metric([*labels, str(last["index"]), quantile], last[key] / 1000)
    flags = CounterMetricFamily("harness_flags", METRICS["harness_flags"], labels=["flag"])
    for flag, count in sorted(view["flag_counts"].items()):
        flags.add_metric([flag], count)
    yield from (replies, served, errors, achieved, latency, flags)


def bench_families(view: dict[str, Any]) -> Iterator[Metric]:
    """A bench's rows (harness.bench_live.round_row): rounds, each app's last figure and
    the ratio with its interval; nothing outside a bench."""
    rows = view.get("bench") or []
    if not rows:
        return
    done, most = (
        GaugeMetricFamily(name, METRICS[name], labels=list(BENCH_LABELS))
        for name in ("harness_bench_rounds", "harness_bench_rounds_max")
    )
    figure = GaugeMetricFamily(
        "harness_bench_figure", METRICS["harness_bench_figure"], labels=[*BENCH_LABELS, "app"]
    )
    ratio = GaugeMetricFamily(
        "harness_bench_ratio", METRICS["harness_bench_ratio"], labels=[*BENCH_LABELS, "bound"]
    )
    for row in rows:
        labels = [row["framework"], row["protocol"], row["figure"]]
        done.add_metric(labels, row["rounds_done"])
        most.add_metric(labels, row["rounds_max"])
        for app in ("ours", "minimal"):
            if row[app] and row[app][-1] is not None:
                figure.add_metric([*labels, app], row[app][-1])
        bounds = zip(("low", "high"), row["ci"] or (), strict=False)
        for bound, value in (("estimate", row["ratio"]), *bounds):
            if value is not None:
                ratio.add_metric([*labels, bound], value)
    yield from (done, most, figure, ratio)


EMPTY_REGISTRY = CollectorRegistry(auto_describe=False)  # what a scrape reads before the plan


def run_registry(state: LiveState) -> CollectorRegistry:
    """A registry of the run's own with the run's collector in it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(state))  # type: ignore[arg-type]
    return registry


def exposition(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """The registry's metrics in the format the scraper accepts (OpenMetrics when it asks
    for it, else the text format), and its content type."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type

"""steps.csv: one row per case and step, autobench-like, for spreadsheets."""

from __future__ import annotations

import csv
from pathlib import Path

from model.files import atomic_writer
from model.results import Run

STEPS_CSV_COLUMNS = (
    "framework",
    "scenario",
    "sink",
    "driver",
    "process_model",
    "affinity",
    "protocol",
    "status",
    "step",
    "offered",
    "unit",
    "achieved",
    "replies",
    "errors_total",
    "error_rate",
    "latency_avg_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_p99.9_ms",
    "latency_p99.99_ms",
    "latency_max_ms",
    "latency_p99_uncorrected_ms",
    "server_cpu_pct",
    "agent_cpu_pct",
    "rss_max_bytes",
    "tick_avg_ms",
    "tick_max_ms",
    "probe_ms",
    "flags",
    "bottleneck",
)


def write_steps_csv(run: Run, path: Path) -> None:
    """One row per case and step (a case without steps: one row, its step cells empty);
    written atomically, as run.json is."""
    with atomic_writer(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEPS_CSV_COLUMNS)
        for case in run.cases:
            head = [
                case.framework,
                case.scenario,
                case.sink,
                case.driver,
                case.process_model,
                case.affinity.get("mode"),
                case.protocol,
                case.status,
            ]
            if not case.steps:
                writer.writerow(head + [""] * (len(STEPS_CSV_COLUMNS) - len(head)))
            for index, step in enumerate(case.steps):
                latency = step.latency_ms
                uncorrected = step.latency_uncorrected_ms or {}
                writer.writerow(
                    [
                        *head,
                        index,
                        step.offered,
                        step.unit,
                        step.achieved,
                        step.replies,
                        step.errors["total"],
                        step.error_rate,
                        latency["avg"],
                        latency["p50"],
                        latency["p90"],
                        latency["p99"],
                        latency["p99.9"],
                        latency["p99.99"],
                        latency["max"],
                        uncorrected.get("p99"),
                        step.server_cpu_pct,
                        step.agent_cpu_pct,
                        step.rss_max_bytes,
                        step.tick_ms.get("avg"),
                        step.tick_ms.get("max"),
                        step.probe_ms,
                        " ".join(step.flags),
                        step.bottleneck,
                    ]
                )

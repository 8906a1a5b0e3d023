"""mcload: the memcached-proxy study's stress tool — long-lived connections asking `get <key>`.

`python -m drivers.mcload --port P --connections 100 --duration 10 --key K --value-hex H`
keeps every connection open for the whole step, sends one `get` at a time on each, checks
every answer against the expected value, and prints one `MCLOAD_JSON {...}` line: good
replies, errors by kind (a wrong or missing value is `wrong`), latency percentiles from an
HDR histogram and the histogram itself (base64). `McLoadDriver` runs it as the `mcload`
driver and parses that line.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Self

from drivers import histograms as hdr
from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures

REPORT_PREFIX = "MCLOAD_JSON "


def parse_mcload(text: str) -> DriverResult:
    """Merge-free parse of one mcload process's report line; its latency comes from the
    histogram when the line carries one (every percentile), else from its figures."""
    for line in text.splitlines():
        if line.startswith(REPORT_PREFIX):
            report = json.loads(line[len(REPORT_PREFIX) :])
            latency_us = report["latency_us"]
            latency: dict[str, float | None] = {
                "avg": _ms(latency_us["mean"]),
                "p50": _ms(latency_us["p50"]),
                "p90": _ms(latency_us["p90"]),
                "p99": _ms(latency_us["p99"]),
                "max": _ms(latency_us["max"]),
            }
            encoded = report.get("histogram")  # absent from reports before harness.run/4
            if encoded:
                latency = hdr.latency_ms(hdr.decode(encoded))
            return DriverResult(
                replies=int(report["replies"]),
                duration_s=float(report["duration_s"]),
                errors={kind: int(n) for kind, n in report["errors"].items()},
                latency_ms=latency,
                figures=StepFigures(connections=int(report["connections"])),
                histograms={"latency": encoded} if encoded else {},
            )
    lines = [line for line in text.strip().splitlines() if line.strip()]
    raise DriverOutputError(f"mcload gave no report: {lines[-1] if lines else '(no output)'}")


def _ms(value_us: float | None) -> float | None:
    return None if value_us is None else value_us / 1000.0


class McLoadDriver:
    """`offered` long-lived connections for `duration_s`, split over the load CPUs."""

    name = "mcload"
    tool = "python"  # `python -m drivers.mcload`: ships with the harness
    package = None
    tool_version_args = ("--version",)
    ramp_kinds = ("concurrency",)
    protocols = ("h1",)
    # mcload: SIGINT ends its loops (KeyboardInterrupt) and prints its totals
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = True

    def __init__(self, processes: int = 1) -> None:
        self.processes = processes

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        return cls(processes=load_cpu_count)

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        if target.expected_body is None:
            raise ValueError("mcload checks every answer: the target needs an expected body")
        connections = int(step.offered)
        count = max(1, min(self.processes, connections))
        shares = [connections // count + (i < connections % count) for i in range(count)]
        key = target.scenario.path  # the memcached key, for the socket protocol
        return [
            [
                sys.executable,
                "-m",
                "drivers.mcload",
                "--host",
                target.host,
                "--port",
                str(target.port),
                "--connections",
                str(share),
                "--duration",
                f"{step.duration_s or 10:g}",
                "--timeout",
                f"{target.timeout_s:g}",
                "--key",
                key,
                "--value-hex",
                target.expected_body.hex(),
            ]
            for share in shares
        ]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_mcload(text)

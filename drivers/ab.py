"""ab (ApacheBench): concurrency steps, the process-model study's tool (`ab -c2000 -n10000 -k`).

ab compares every reply's length with the first one and calls a difference a failed
request ("Length"). When the scenario's replies legitimately differ in length (/counter)
those are artefacts and are kept apart in `figures.length_mismatches`; otherwise they are
real errors of kind `length`.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Self

from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures

MAX_REQUESTS_PER_TIMED_STEP = 50_000_000  # ab -t stops at -n; make time the limit

_NUMBER = r"([\d.]+)"
_FIELDS = {
    "complete": re.compile(r"Complete requests:\s+(\d+)"),
    "failed": re.compile(r"Failed requests:\s+(\d+)"),
    "taken_s": re.compile(rf"Time taken for tests:\s+{_NUMBER} seconds"),
    "rate": re.compile(rf"Requests per second:\s+{_NUMBER}"),
}
_FAILED_KINDS = re.compile(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)")
_NON_2XX = re.compile(r"Non-2xx responses:\s+(\d+)")
_TOTAL_TIMES = re.compile(r"^Total:\s+(\d+)\s+(\d+)\s+[\d.]+\s+(\d+)\s+(\d+)", re.MULTILINE)
_PERCENTILE = re.compile(r"^\s+(\d+)%\s+(\d+)", re.MULTILINE)


def parse_ab(text: str, body_length_varies: bool = False) -> DriverResult:
    """Parse ab's report; an aborted run (refused, timed out) raises with ab's own reason."""
    found = {name: pattern.search(text) for name, pattern in _FIELDS.items()}
    if any(match is None for match in found.values()):
        lines = [line for line in text.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else "(no output)"
        raise DriverOutputError(f"ab aborted: {reason.split('...')[-1].strip()}")
    complete = int(found["complete"].group(1))  # type: ignore[union-attr]
    connect = receive = length = exceptions = 0
    kinds = _FAILED_KINDS.search(text)
    if kinds:
        connect, receive, length, exceptions = (int(n) for n in kinds.groups())
    non_2xx_match = _NON_2XX.search(text)
    non_2xx = int(non_2xx_match.group(1)) if non_2xx_match else 0
    errors = {"connect": connect, "read": receive, "other": exceptions, "status": non_2xx}
    mismatches = None
    if body_length_varies:
        mismatches = length
    else:
        errors["length"] = length
    latency = no_latency()
    percentiles = {int(p): float(ms) for p, ms in _PERCENTILE.findall(text)}
    totals = _TOTAL_TIMES.search(text)
    if totals:
        latency["avg"] = float(totals.group(2))
    for key, percent in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        latency[key] = percentiles.get(percent)
    bad = non_2xx + (0 if body_length_varies else length) + receive + exceptions
    return DriverResult(
        replies=max(0, complete - bad),
        duration_s=float(found["taken_s"].group(1)),  # type: ignore[union-attr]
        errors=errors,
        latency_ms=latency,
        figures=StepFigures(complete_requests=complete, length_mismatches=mismatches),
    )


class AbDriver:
    """Concurrency steps: `-c offered` for `duration_s`, or `-n requests` when the ramp says."""

    name = "ab"
    tool = "ab"
    package = "apache2-utils"
    tool_version_args = ("-V",)
    ramp_kinds = ("concurrency",)
    protocols = ("h1",)
    # ab: SIGINT prints the results of the requests finished so far, then exits
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = False

    def __init__(self, requests_per_step: int | None = None, keep_alive: bool = True) -> None:
        self.requests_per_step = requests_per_step
        # -n: ab runs until it has sent them, whatever the time (no watchdog:
        # drivers.watchdog.scheduled_run_s)
        self.counts_requests = bool(requests_per_step)
        self.keep_alive = keep_alive

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        return cls(requests_per_step=options.get("requests_per_step"))

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        command = [
            "ab",
            "-q",
            "-r",
            f"-c{int(step.offered)}",
            f"-s{max(1, round(target.timeout_s))}",
        ]
        if self.keep_alive:
            command.append("-k")
        if self.requests_per_step:
            command.append(f"-n{self.requests_per_step}")
        else:
            command += [f"-t{step.duration_s:g}", f"-n{MAX_REQUESTS_PER_TIMED_STEP}"]
        scenario = target.scenario
        if scenario.method == "POST":
            body = workdir / "ab-body"
            body.write_bytes(scenario.body or b"")
            command += ["-p", str(body), "-T", scenario.content_type or "text/plain"]
        elif scenario.method != "GET":
            command += ["-m", scenario.method]
        return [[*command, target.url]]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_ab(text, target.scenario.body_length_varies)

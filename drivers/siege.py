"""siege: concurrency steps in benchmark mode (the autobench study's file and GridFS runs).

siege refuses more than `limit` users (255 by default), so the harness writes its own
siegerc beside the step's raw output. Its JSON report counts replies of 400 and above as
transactions that were not successful: those are `status` errors here.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import tempfile
from pathlib import Path
from typing import Self

from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep

SIEGERC = """\
limit = {limit}
verbose = false
quiet = true
show-logfile = false
logging = false
protocol = HTTP/1.1
connection = keep-alive
failures = 1000000000
timeout = {timeout}
"""
_JSON_OBJECT = re.compile(r"\{[^{}]*\"transactions\"[^{}]*\}", re.DOTALL)


def parse_siege(text: str) -> DriverResult:
    """Parse siege's `--json-output` report; an aborted run raises with its last error."""
    match = _JSON_OBJECT.search(text)
    if match is None:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        reason = re.sub(r"\x1b\[[\d;]*m", "", lines[-1]) if lines else "(no output)"
        raise DriverOutputError(f"siege gave no report: {reason.strip()}")
    report = json.loads(match.group(0))
    transactions = int(report["transactions"])
    successful = int(report["successful_transactions"])
    elapsed_s = float(report["elapsed_time"])
    latency = no_latency()
    if successful:
        latency["avg"] = float(report["response_time"]) * 1000.0
        latency["max"] = float(report["longest_transaction"]) * 1000.0
    return DriverResult(
        replies=successful,
        duration_s=elapsed_s,
        errors={"other": int(report["failed_transactions"]), "status": transactions - successful},
        latency_ms=latency,
        extra={
            "megabytes": float(report["data_transferred"]),
            "megabytes_per_s": float(report["throughput"]),
            "availability_pct": float(report["availability"]),
        },
    )


def write_urls_file(directory: Path, text: str) -> Path:
    """The URL list in `directory`, a private one at a short path: siege 4.0.7 overruns its
    buffer on a long `--file` path (a 150-character pytest path became
    `urls.txtT\ufffd-V: No such file`), so the list cannot sit beside the raw output.
    Created, never reused: a name that exists already is an error, not an input."""
    path = directory / "urls.txt"
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # the previous step's list
    with path.open("x") as urls:  # O_EXCL: never through a symlink
        urls.write(text)
    return path


class SiegeDriver:
    """Benchmark mode (-b): `offered` users for `duration_s`, keep-alive, JSON report."""

    name = "siege"
    tool = "siege"
    package = "siege"
    tool_version_args = ("--version",)
    ramp_kinds = ("concurrency",)
    protocols = ("h1",)
    # siege: SIGINT is its Ctrl-C: "Lifting the server siege" and the JSON report
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = False

    def __init__(self) -> None:
        # This driver's own directory (mode 0700, under the short system temp dir), for
        # the URL lists; removed with the driver (one per case) or at exit.
        self._private: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        return cls()

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        users = int(step.offered)
        rc_file = workdir / "siegerc"
        rc_file.write_text(SIEGERC.format(limit=max(users, 255), timeout=round(target.timeout_s)))
        url = target.url
        scenario = target.scenario
        url_file: list[str] = []
        if target.paths:  # the autobench study: random URLs from the list (internet mode, -i)
            text = "\n".join(target.urls()) + "\n"
            (workdir / "urls.txt").write_text(text)  # the record, beside the raw output
            if self._private is None:
                self._private = tempfile.TemporaryDirectory(prefix="siege-")
            url_file = ["-i", f"--file={write_urls_file(Path(self._private.name), text)}"]
        if scenario.method == "POST":
            url = f"{url} POST {(scenario.body or b'').decode()}"
        command = [
            "siege",
            f"--rc={rc_file}",
            "-b",
            "-j",
            f"-c{users}",
            f"-t{max(1, round(step.duration_s or 10))}S",
        ]
        if scenario.content_type:
            command.append(f"--content-type={scenario.content_type}")
        if url_file:
            return [[*command, *url_file]]
        return [[*command, url]]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_siege(text)

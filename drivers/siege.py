"""siege: concurrency steps in benchmark mode (the autobench study's file and GridFS runs).

Repetitions, not time, once it knows a rate: siege 4.0's timed mode (`-t`) hangs now and
then at its end — its timer cancels the user threads and one never joins, with every
signal then blocked, so not even SIGINT gets its report out (measured here: 1 of 200
consecutive 2 s `-t` runs against our gevent server hung and printed nothing on SIGINT;
0 of 200 `-r` runs did). So each step after the first measured one runs `-r N`, N sized
from the last step's rate to last about `duration_s` (`reps_for`), and only a case's first
step (usually the warm-up) runs timed; the watchdog and the retry (drivers.base,
harness.run.http_case) cover that one.

siege refuses more than `limit` users (255 by default), so the harness writes its own
siegerc beside the step's raw output. Its JSON report counts replies of 400 and above as
transactions that were not successful: those are `status` errors here.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import signal
import tempfile
from pathlib import Path
from typing import Self

from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures
from servers import scratch

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
        figures=StepFigures(
            megabytes=float(report["data_transferred"]),
            megabytes_per_s=float(report["throughput"]),
            availability_pct=float(report["availability"]),
        ),
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
        # good replies/s of the last step it measured (the warm-up's too): sizes -r
        self._last_rate: float | None = None

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
                self._private = scratch.temporary_directory("siege")
            url_file = ["-i", f"--file={write_urls_file(Path(self._private.name), text)}"]
        if scenario.method == "POST":
            url = f"{url} POST {(scenario.body or b'').decode()}"
        duration_s = step.duration_s or 10
        reps = reps_for(self._last_rate, users, duration_s)
        command = [
            "siege",
            f"--rc={rc_file}",
            "-b",
            "-j",
            f"-c{users}",
            f"-r{reps}" if reps is not None else f"-t{max(1, round(duration_s))}S",
        ]
        if scenario.content_type:
            command.append(f"--content-type={scenario.content_type}")
        if url_file:
            return [[*command, *url_file]]
        return [[*command, url]]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        result = parse_siege(text)
        if result.replies and result.duration_s > 0:
            self._last_rate = result.replies / result.duration_s
        return result


# -r below this many repetitions per user measures start-up more than the server
MIN_REPS_PER_USER = 5


def reps_for(rate_per_s: float | None, users: int, duration_s: float) -> int | None:
    """Repetitions per user for a step of `users` to last about `duration_s` at the rate
    the last step measured (the server's throughput carries over: at saturation more users
    share the same rate); None, timed mode, when no rate is known yet."""
    if not rate_per_s or users < 1:
        return None
    return max(MIN_REPS_PER_USER, math.ceil(rate_per_s * duration_s / users))

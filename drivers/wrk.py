"""wrk: closed-loop concurrency steps, with a Lua `done()` report parsed as JSON."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from harness.errors import UserError

REPORT_PREFIX = "WRK_JSON "

# wrk calls done() once at the end; latency is in microseconds.
DONE_SCRIPT = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.3f,"max":%d,"stdev":%.3f,' ..
    '"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9)))
end
"""


@dataclass(frozen=True)
class WrkReport:
    """What one wrk run measured."""

    requests: int
    duration_s: float
    bytes_read: int
    errors: dict[str, int]
    latency_ms: dict[str, float]

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def errors_total(self) -> int:
        return sum(self.errors.values())


def parse_wrk(text: str) -> WrkReport:
    """Parse wrk's output with our done() report line; ValueError when there is none."""
    for line in text.splitlines():
        if line.startswith(REPORT_PREFIX):
            report = json.loads(line[len(REPORT_PREFIX) :])
            return WrkReport(
                requests=report["requests"],
                duration_s=report["duration_us"] / 1e6,
                bytes_read=report["bytes"],
                errors=dict(report["errors"]),
                latency_ms={k: v / 1000.0 for k, v in report["latency_us"].items()},
            )
    first_line = text.strip().splitlines()[0] if text.strip() else "(no output)"
    raise ValueError(f"wrk output has no {REPORT_PREFIX.strip()} report line: {first_line}")


def wrk_command(
    url: str, *, connections: int, duration_s: float, threads: int = 1, script_path: str,
    timeout_s: float = 5.0, cpus: str | None = None,
) -> list[str]:  # fmt: skip
    """The wrk command line, pinned with taskset when `cpus` is given."""
    command = [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s:g}s",
        f"--timeout={timeout_s:g}s", "-s", script_path, url,
    ]  # fmt: skip
    return ["taskset", "-c", cpus, *command] if cpus is not None else command


def run_wrk(
    url: str, *, connections: int, duration_s: float, threads: int = 1,
    cpus: str | None = None, script_dir: str = "/tmp",
) -> tuple[WrkReport, str]:  # fmt: skip
    """Run wrk once and return its parsed report and raw output."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".lua", dir=script_dir, delete=False) as script:
        script.write(DONE_SCRIPT)
    command = wrk_command(
        url, connections=connections, duration_s=duration_s, threads=threads,
        script_path=script.name, cpus=cpus,
    )  # fmt: skip
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=duration_s + 30,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except FileNotFoundError as missing:
        raise UserError(f"{missing.filename} not found: run `harness doctor --install`") from None
    finally:
        import os

        os.unlink(script.name)
    output = result.stdout + result.stderr
    try:
        return parse_wrk(output), output
    except ValueError as error:
        raise UserError(f"wrk failed (exit {result.returncode}): {error}") from None

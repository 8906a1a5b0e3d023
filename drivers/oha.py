"""oha: open-loop constant-rate steps, latency from each request's intended send time.

`oha -q RATE --latency-correction` sends requests on a fixed schedule (the i-th at
start + i/RATE) whatever the replies do; a request due while its `-c` connections are all
busy waits, and with the correction its latency counts from when it was due, so a server
that stalls is charged for every request it held up (no coordinated omission). oha's
JSON report has percentiles only (no histogram worth keeping: 11 buckets), but its
request log (`--db-url`, SQLite, one row per completed request) has, for each request,
the intended send (`start_latency_correction`), the actual send (`start`) and the end.
From those rows the parser builds two HdrHistograms over the same requests of the same
run: `latency` (from the intended send: the figure to sign) and `latency_uncorrected`
(from the actual send: what a closed-loop tool would have reported), so the correction
is visible without a second run.

What oha does not see: requests still queued at the deadline are never sent and never
logged. A server that cannot keep up therefore shows as achieved < offered (and its
queue's wait in the latencies of the requests that were sent), not as missing latencies.

Protocols: the Target's URL (https for h1-tls and h2); `--http2` for h2 (ALPN h2 only:
a server without it ends the handshake with a TLS alert, counted as errors, so oha
cannot fall back) and for h2c (an http URL with --http2: prior knowledge). oha verifies
the server's certificate, against the run's CA (`--cacert`, beside the system's store)
when the Target names one. It does not report the protocol it spoke (`negotiated` is
None): without --http2 it speaks HTTP/1.1 only, with it HTTP/2 only. Each connection
carries one request at a time (`-p 1`, its default), as on HTTP/1.1.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Self

from drivers import histograms as hdr
from drivers.base import (
    DriverOptions,
    DriverOutputError,
    DriverResult,
    Target,
    cargo_binary,
)
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures
from servers.contract import PROTOCOL_H1, PROTOCOL_H1_TLS, PROTOCOL_H2, PROTOCOL_H2C

OHA_VERSION = "1.16.0"
PACKAGE = f"cargo:oha@{OHA_VERSION}"
DEFAULT_CONNECTIONS = 100

# oha's error messages (its errorDistribution keys) → the harness's error kinds
ERROR_KINDS = (  # first match wins: "Connection reset" is a reset, not a connect error
    (re.compile(r"reset|broken pipe", re.IGNORECASE), "reset"),
    (re.compile(r"timeout|timed out", re.IGNORECASE), "timeout"),
    (re.compile(r"refused|connect error|unreachable|no route|lookup", re.IGNORECASE), "connect"),
    (re.compile(r"incomplete|closed|eof|parse", re.IGNORECASE), "read"),
)


# oha's own cut at the end of `-z`: over HTTP/2 it reports a few (at most one per
# connection) even with --wait-ongoing-requests-after-deadline, every scheduled request
# answered. Not the server's doing: kept out of the errors, counted in the figures
# (`aborted_at_deadline`).
DEADLINE_ABORT = "aborted due to deadline"


class Request(NamedTuple):
    """One row of oha's request log: seconds from oha's start, and the status."""

    start_s: float  # when it was actually sent
    intended_s: float | None  # when it was due (None without --latency-correction)
    end_s: float
    status: int


def error_kind(message: str) -> str:
    """The harness's error kind for one of oha's error messages."""
    for pattern, kind in ERROR_KINDS:
        if pattern.search(message):
            return kind
    return "other"


# oha's own line on stderr after the run; it lands inside the JSON in a file that takes
# both streams (stdout is flushed after it), so it is taken out before decoding
STORING_LINE = re.compile(r"^Storing results to .*$\n?", re.MULTILINE)


def report_json(text: str) -> dict[str, Any]:
    """oha's JSON report from its output (its stderr lines taken out)."""
    text = STORING_LINE.sub("", text)
    start = text.find("{")
    if start < 0:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        raise DriverOutputError(f"oha gave no JSON report: {lines[-1] if lines else '(no output)'}")
    try:
        report, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as error:
        raise DriverOutputError(f"oha's JSON report is cut short: {error}") from None
    if not isinstance(report, dict) or "summary" not in report:
        raise DriverOutputError("oha's output is not its JSON report (no summary)")
    return report


def max_in_flight(requests: Sequence[Request]) -> int:
    """The most requests in flight at once (sent, not yet answered)."""
    events = sorted(
        [(r.start_s, 1) for r in requests] + [(r.end_s, -1) for r in requests],
        key=lambda event: (event[0], event[1]),  # an end before a start at the same time
    )
    in_flight = most = 0
    for _, change in events:
        in_flight += change
        most = max(most, in_flight)
    return most


def parse_oha(
    text: str,
    requests: Sequence[Request],
    *,
    offered_per_s: float,
    duration_s: float,
    connections: int,
) -> DriverResult:
    """One oha step: its JSON report (`text`, for the errors) and its request log
    (`requests`, for everything else) as a result; DriverOutputError without a report.

    Good replies are the logged 2xx; non-2xx replies are `status` errors (their latency
    counts, as wrk's do); oha's errors (refused, timed out...) are counted by kind. Rates
    are over the step's scheduled `duration_s`: the window in which the requests were due.
    """
    report = report_json(text)
    errors: dict[str, int] = {}
    aborted = 0
    for message, count in (report.get("errorDistribution") or {}).items():
        if message == DEADLINE_ABORT:
            aborted += int(count)
            continue
        kind = error_kind(message)
        errors[kind] = errors.get(kind, 0) + int(count)
    replies = sum(1 for r in requests if 200 <= r.status < 300)
    if len(requests) > replies:
        errors["status"] = errors.get("status", 0) + len(requests) - replies
    intended = [r.start_s if r.intended_s is None else r.intended_s for r in requests]
    corrected = hdr.histogram_of_counts(
        Counter(round((r.end_s - due) * 1e6) for r, due in zip(requests, intended, strict=True))
    )
    uncorrected = hdr.histogram_of_counts(
        Counter(round((r.end_s - r.start_s) * 1e6) for r in requests)
    )
    lag = hdr.histogram_of_counts(
        Counter(round((r.start_s - due) * 1e6) for r, due in zip(requests, intended, strict=True))
    )
    sent = len(requests) + sum(errors.values()) - errors.get("status", 0)
    histograms = (
        {"latency": hdr.encode(corrected), "latency_uncorrected": hdr.encode(uncorrected)}
        if requests
        else {}
    )
    busiest = max_in_flight(requests)
    return DriverResult(
        replies=replies,
        duration_s=duration_s,
        errors=errors,
        latency_ms=hdr.latency_ms(corrected),
        achieved=replies / duration_s if duration_s > 0 else 0.0,
        latency_uncorrected_ms=hdr.latency_ms(uncorrected),
        histograms=histograms,
        figures=StepFigures(
            requests=len(requests),
            offered_per_s=offered_per_s,
            sent_per_s=round(sent / duration_s, 1) if duration_s > 0 else 0.0,
            # (sent - due) / due: how far oha was from its schedule over the step
            schedule_error=round(sent / duration_s / offered_per_s - 1.0, 4)
            if duration_s > 0 and offered_per_s > 0
            else None,
            connections=connections,
            max_in_flight=busiest,
            aborted_at_deadline=aborted,
            # the wait between a request's due time and its send (a free connection)
            send_lag_p99_ms=(
                round(lag.get_value_at_percentile(99) / 1000.0, 3) if requests else None
            ),
            bytes_read=int(report["summary"].get("totalData") or 0),
            megabytes_per_s=round(
                int(report["summary"].get("totalData") or 0) / duration_s / 1e6, 3
            )
            if duration_s > 0
            else 0.0,
        ),
    )


def read_requests(db_path: Path) -> list[Request]:
    """Every row of oha's request log (`--db-url`); [] when oha logged none (every
    request failed: it then writes no file)."""
    if not db_path.is_file():
        return []
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT start, start_latency_correction, end, status FROM oha"
        ).fetchall()
    return [
        Request(float(s), None if i is None else float(i), float(e), int(c)) for s, i, e, c in rows
    ]


def request_log_path(step: RampStep, workdir: Path) -> Path:
    """Where a step's request log goes (beside its raw output)."""
    name = "warmup" if step.index < 0 else f"step{step.index:03d}"
    return workdir / f"oha-{name}.sqlite"


class OhaDriver:
    """Open loop: each step sends `step.offered` req/s for `step.duration_s` over at most
    `connections` connections, latency from each request's intended send."""

    name = "oha"
    tool = "oha"
    package = PACKAGE
    tool_version_args = ("--version",)
    ramp_kinds = ("constant-rate", "rate")
    protocols = (PROTOCOL_H1, PROTOCOL_H1_TLS, PROTOCOL_H2, PROTOCOL_H2C)
    ca_trusted = True  # --cacert: the run's CA (the system's store for a user's certificate)
    # oha: SIGINT (Ctrl-C) stops sending and writes the report of what it sent
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = False

    def __init__(self, connections: int = DEFAULT_CONNECTIONS, worker_threads: int = 1) -> None:
        self.connections = connections
        self.worker_threads = worker_threads

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        connections = ramp.connections if ramp.kind == "constant-rate" else DEFAULT_CONNECTIONS  # type: ignore[union-attr]
        return cls(
            connections=int(connections or DEFAULT_CONNECTIONS), worker_threads=load_cpu_count
        )

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        if target.expected_body is not None:
            raise ValueError("oha does not check reply bodies: use wrk for checked scenarios")
        if not step.duration_s:
            raise ValueError("an oha step needs a duration")
        db_path = request_log_path(step, workdir)
        db_path.unlink(missing_ok=True)  # oha appends to an existing log
        scenario = target.scenario
        command = [
            str(cargo_binary(self.tool, self.package)),
            "--no-tui",
            "--output-format",
            "json",
            "-q",
            f"{step.offered:g}",
            "--latency-correction",
            "-z",
            f"{round(step.duration_s * 1000)}ms",
            # requests in flight at the deadline are answered and counted, not cut off
            "--wait-ongoing-requests-after-deadline",
            "-c",
            str(self.connections),
            "-t",
            f"{round(target.timeout_s * 1000)}ms",
            "--worker-threads",
            str(self.worker_threads),
            "--db-url",
            str(db_path),
            "-m",
            scenario.method,
        ]
        if target.protocol in (PROTOCOL_H2, PROTOCOL_H2C):
            command.append("--http2")
        if target.ca_path is not None:
            command += ["--cacert", str(target.ca_path)]
        if scenario.body is not None:
            command += ["-d", scenario.body.decode()]
        if scenario.content_type:
            command += ["-T", scenario.content_type]
        if target.paths:
            urls = workdir / "oha-urls.txt"
            urls.write_text("\n".join(target.urls()) + "\n")
            command += ["--urls-from-file", str(urls)]
        else:
            command.append(target.url)
        return [command]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_oha(
            text,
            read_requests(request_log_path(step, workdir)),
            offered_per_s=step.offered,
            duration_s=step.duration_s or 0.0,
            connections=self.connections,
        )

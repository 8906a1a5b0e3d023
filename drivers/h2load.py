"""h2load (nghttp2): closed-loop concurrency steps over HTTP/2 (h2, h2c) and HTTP/1.1.

Each step holds `-c` connections with `-m` requests in flight on each for `-D` seconds,
over `-t` threads (at most the load CPUs). A step's concurrency (`step.offered`) is the
requests in flight, the axis wrk's steps have (one request per connection): with no
`multiplexed_connections` h2load opens `step.offered` connections with one stream each;
with `multiplexed_connections = C` it opens C and runs `step.offered / C` streams on each
(concurrency 1,000 over 10 connections: `-c 10 -m 100`), so one profile can compare 1, 10
and 100 streams per connection at a fixed connection count.

The protocol is the Target's: `h2` is an https URL with ALPN (`h2`, then h2load's own
fall-backs: a server that selects http/1.1 instead is reported so, and run_step refuses
the step), `h2c` an http URL with prior knowledge (h2load's default for http URLs), and
`h1` / `h1-tls` `--h1` on an http / https URL. On HTTP/1.1, `-m` above 1 would pipeline,
which the contract does not ask of a server: a multiplexed h1 step is refused.
Random-path scenarios (files, gridfs) run from a seeded random list of URLs that each
client cycles (`--input-file`); checked scenarios need wrk (h2load keeps no bodies).

h2load does not verify the server's certificate (it has no option to): a TLS step
trusts whatever the port presents, as wrk's does; the harness checks the certificate and
the ALPN the server selects once per case, before any step.

What h2load cannot do, and why it is not used for it:
- `-r/--rate N` starts N *connections* per `--rate-period`, each making its share of `-n`
  requests as fast as it can; it is exclusive with `-D`. `--rps N` paces each client's
  requests, but a request due while the client's streams are all busy waits and its
  latency counts from its actual send: neither is an open-loop request rate (oha is).
- `-N/-T` (connection inactivity / active timeouts) abort h2load 1.52 in timing mode
  (a libev assertion, `epoll_modify`) when they fire, so h2load runs without a timeout:
  a stalled request is in flight at the end of the step (`figures.unanswered`).
- In timing mode a connection the server resets is not reopened and its requests are not
  counted as errors (h2load reopens only after a graceful close: `Connection: close`,
  GOAWAY); a step in which no request was answered is a failed step, never a zero.

Error kinds (drivers.base): non-2xx replies are `status`; streams that ended without a
whole reply (RST_STREAM, a connection lost after a graceful close) are h2load's `errored`,
counted as `reset`; h2load's `timeout` count is `timeout` (always 0 without -N/-T).

Latency: h2load prints only min/max/mean of its per-request times, so each step also
writes `--log-file` (one row per answered request: start µs, status, µs to the reply's
end) and the parser builds the step's HdrHistogram from it. Latency counts from each
request's send (closed loop: there is no intended send). The load generator's CPU is
measured by the harness's monitor from h2load's pid, as for wrk.
"""

from __future__ import annotations

import dataclasses
import random
import re
import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Self

from drivers import histograms as hdr
from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures
from servers.contract import (
    PROTOCOL_H1,
    PROTOCOL_H1_TLS,
    PROTOCOL_H2,
    PROTOCOL_H2C,
)

# h2load's "Application protocol:" names → servers.contract.PROTOCOLS (http/1.1 is h1 or
# h1-tls by whether a TLS handshake was reported)
APPLICATION_PROTOCOLS = {"h2": PROTOCOL_H2, "h2c": PROTOCOL_H2C}
HTTP11 = "http/1.1"

_TIMING = re.compile(
    r"Timing-based test with [\d.]+s of warm-up time and ([\d.]+)s of main duration"
)
_FINISHED = re.compile(r"^finished in ([\d.]+)(us|ms|s), ([\d.]+) req/s", re.MULTILINE)
_REQUESTS = re.compile(
    r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
    r"(\d+) errored, (\d+) timeout",
    re.MULTILINE,
)
_STATUS = re.compile(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", re.MULTILINE)
_TRAFFIC = re.compile(r"^traffic: \S+ \((\d+)\) total", re.MULTILINE)
_TIME_FOR_REQUEST = re.compile(
    r"^time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)",
    re.MULTILINE,
)
_APPLICATION = re.compile(r"^Application protocol: (\S+)", re.MULTILINE)
_TLS_PROTOCOL = re.compile(r"^TLS Protocol: (\S+)", re.MULTILINE)
_CIPHER = re.compile(r"^Cipher: (\S+)", re.MULTILINE)
_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


class LoggedRequest(NamedTuple):
    """One row of h2load's `--log-file`."""

    start_us: int  # µs since the epoch
    status: int  # -1: the stream failed
    latency_us: int  # from the request's send to the end of its reply


def _seconds(value: str, unit: str) -> float:
    return float(value) * _UNIT_S[unit]


def negotiated_protocol(text: str) -> str | None:
    """What h2load reports it spoke, as servers.contract.PROTOCOLS names it; None when it
    reports nothing (no connection was made). DriverOutputError for a protocol the
    contract does not have, or two different ones in one run."""
    names = set(_APPLICATION.findall(text))
    if not names:
        return None
    if len(names) > 1:
        raise DriverOutputError(f"h2load spoke several protocols in one step: {sorted(names)}")
    name = names.pop()
    if name == HTTP11:
        return PROTOCOL_H1_TLS if _TLS_PROTOCOL.search(text) else PROTOCOL_H1
    if name not in APPLICATION_PROTOCOLS:
        raise DriverOutputError(f"h2load spoke {name}, which is none of the contract's protocols")
    return APPLICATION_PROTOCOLS[name]


def parse_h2load(text: str, requests: Sequence[LoggedRequest] = ()) -> DriverResult:
    """One h2load step: its summary (`text`) and, when kept, its request log (`requests`,
    for the latency histogram); DriverOutputError when there is no summary or no request
    was answered.

    Good replies are the 2xx; 3xx/4xx/5xx are `status` errors (their latency counts, as
    wrk's does); `errored` streams are `reset`. Without a log the latency is h2load's
    mean and max only.
    """
    finished = _FINISHED.search(text)
    counts = _REQUESTS.search(text)
    statuses = _STATUS.search(text)
    if finished is None or counts is None or statuses is None:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        raise DriverOutputError(f"h2load gave no summary: {lines[-1] if lines else '(no output)'}")
    # timing mode counts requests over its main duration (its req/s is done / that), while
    # `finished in` adds the end of the requests in flight, and, for a step stopped by its
    # connections closing, the overrun
    timing = _TIMING.search(text)
    duration_s = (
        float(timing.group(1)) if timing else _seconds(finished.group(1), finished.group(2))
    )
    _total, started, done, succeeded, _failed, errored, timed_out = (
        int(n) for n in counts.groups()
    )
    ok, redirects, client_errors, server_errors = (int(n) for n in statuses.groups())
    ok = min(ok, succeeded)  # the status codes also count replies after the main duration
    negotiated = negotiated_protocol(text)
    if done == 0:
        why = (
            "no connection was made (refused, or the TLS handshake failed)"
            if negotiated is None
            else f"{started} requests started over {negotiated}, none answered"
        )
        raise DriverOutputError(f"h2load got no reply: {why}")
    errors = {"status": redirects + client_errors + server_errors, "reset": errored}
    errors["timeout"] = timed_out
    latency = no_latency()
    histograms: dict[str, str] = {}
    answered = [r.latency_us for r in requests if r.status >= 0]
    if answered:
        histogram = hdr.histogram_of_counts(Counter(answered))
        latency = hdr.latency_ms(histogram)
        histograms["latency"] = hdr.encode(histogram)
    else:
        times = _TIME_FOR_REQUEST.search(text)
        if times is not None:
            latency["max"] = _seconds(times.group(3), times.group(4)) * 1000.0
            latency["avg"] = _seconds(times.group(5), times.group(6)) * 1000.0
    traffic = _TRAFFIC.search(text)
    bytes_read = int(traffic.group(1)) if traffic else 0
    tls_version = _TLS_PROTOCOL.search(text)
    cipher = _CIPHER.search(text)
    figures = StepFigures(
        requests=done,
        # in flight when the step ended (at most connections × streams), or lost with a
        # connection the server reset (h2load does not count those: see the docstring)
        unanswered=started - done,
        bytes_read=bytes_read,
        megabytes_per_s=round(bytes_read / duration_s / 1e6, 3) if duration_s else 0.0,
        tls_version=tls_version.group(1) if tls_version is not None else None,
        cipher=cipher.group(1) if cipher is not None else None,
    )
    return DriverResult(
        replies=ok,
        duration_s=duration_s,
        errors=errors,
        latency_ms=latency,
        achieved=ok / duration_s if duration_s > 0 else 0.0,
        figures=figures,
        histograms=histograms,
        negotiated=negotiated,
    )


def read_log(path: Path) -> list[LoggedRequest]:
    """Every row of an h2load `--log-file`; [] when there is none."""
    if not path.is_file():
        return []
    rows = []
    with path.open() as log:
        for line in log:
            fields = line.split("\t")
            if len(fields) >= 3:
                rows.append(LoggedRequest(int(fields[0]), int(fields[1]), int(fields[2])))
    return rows


def request_log_path(step: RampStep, workdir: Path) -> Path:
    """Where a step's request log goes (beside its raw output)."""
    name = "warmup" if step.index < 0 else f"step{step.index:03d}"
    return workdir / f"h2load-{name}.tsv"


RANDOM_URLS = 10_000  # random-path scenarios: the list each client cycles through


def write_random_urls(target: Target, step: RampStep, workdir: Path) -> Path:
    """A file of RANDOM_URLS URLs drawn at random from the Target's paths (seeded by the
    step: the same list for every framework). h2load takes its URLs in order, each client
    from the first: a random list cycled is as near to a random path per request as it
    goes (wrk picks one per request)."""
    urls = random.Random(1000 + step.index).choices(target.urls(), k=RANDOM_URLS)
    path = workdir / "h2load-urls.txt"
    path.write_text("\n".join(urls) + "\n")
    return path


def h2load_duration(seconds: float) -> str:
    """`seconds` as h2load's <DURATION> (whole milliseconds, at least one)."""
    return f"{max(1, round(seconds * 1000))}ms"


class H2loadDriver:
    """Closed loop: each step holds `step.offered` requests in flight for `step.duration_s`,
    over `step.offered` connections, or over `multiplexed_connections` as streams."""

    name = "h2load"
    tool = "h2load"
    package = "nghttp2-client"
    tool_version_args = ("--version",)
    # h2-attacks: the attack case (harness.run.attack_case) runs it paced (rps_per_client)
    ramp_kinds = ("concurrency", "h2-attacks")
    protocols = (PROTOCOL_H1, PROTOCOL_H1_TLS, PROTOCOL_H2, PROTOCOL_H2C)
    ca_trusted = False  # h2load verifies no certificate (it has no option to)
    # h2load ignores SIGINT and prints nothing on SIGTERM. Over TLS, against a server slow
    # to finish handshakes (node-http over h2, 200 connections: 1 step in 3 here), a client
    # that connects after the main duration ends is never told to stop and h2load runs on,
    # requesting; with its connections closed under it (ss -K: h2 clients are not
    # reopened) it ends and prints its totals, counted over the main duration only.
    stop_signal = signal.SIGTERM
    stops_by_closing_connections = True
    busy_polls = False
    checks_bodies = False

    def __init__(
        self,
        threads: int = 1,
        multiplexed_connections: int | None = None,
        rps_per_client: float | None = None,
    ) -> None:
        if multiplexed_connections is not None and multiplexed_connections < 1:
            raise ValueError(
                f"multiplexed_connections must be at least 1, not {multiplexed_connections}"
            )
        if rps_per_client is not None and rps_per_client <= 0:
            raise ValueError(f"rps_per_client must be positive, not {rps_per_client}")
        self.threads = threads
        self.multiplexed_connections = multiplexed_connections
        # `--rps`: each client's requests paced (a request due while its streams are all
        # busy waits: see the module's docstring); None: as fast as replies come
        self.rps_per_client = rps_per_client

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        connections = options.get("multiplexed_connections")
        driver = cls(threads=load_cpu_count, multiplexed_connections=connections)
        if ramp.kind == "h2-attacks":  # its case makes its own, sized by the ramp
            return driver
        for step in ramp:  # every level must split evenly: refused now, not mid-run
            driver.shape(step)
        return driver

    def shape(self, step: RampStep) -> tuple[int, int]:
        """(connections, streams per connection) for a step; ValueError when its
        concurrency does not split evenly over the multiplexed connections."""
        in_flight = int(step.offered)
        if self.multiplexed_connections is None:
            return in_flight, 1
        connections = self.multiplexed_connections
        if in_flight % connections or in_flight < connections:
            raise ValueError(
                f"h2load: concurrency {in_flight} does not split evenly over "
                f"multiplexed_connections = {connections}"
            )
        return connections, in_flight // connections

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        if target.expected_body is not None:
            raise ValueError("h2load does not check reply bodies: use wrk for checked scenarios")
        if not step.duration_s:
            raise ValueError("an h2load step needs a duration")
        connections, streams = self.shape(step)
        http1 = target.protocol in (PROTOCOL_H1, PROTOCOL_H1_TLS)
        if http1 and streams > 1:
            raise ValueError(
                f"h2load would pipeline {streams} HTTP/1.1 requests per connection on "
                f"{target.protocol}: multiplexed_connections is for h2 and h2c"
            )
        if target.protocol not in self.protocols:
            raise ValueError(f"h2load does not speak {target.protocol}")
        log_path = request_log_path(step, workdir)
        log_path.unlink(missing_ok=True)
        command = [
            self.tool,
            f"--threads={max(1, min(self.threads, connections))}",
            f"--clients={connections}",
            f"--max-concurrent-streams={streams}",
            f"--duration={h2load_duration(step.duration_s)}",
            f"--log-file={log_path}",
        ]
        if self.rps_per_client is not None:
            command.append(f"--rps={round(self.rps_per_client, 1):g}")
        if http1:
            command.append("--h1")  # ALPN http/1.1 over TLS, plain HTTP/1.1 over http
        scenario = target.scenario
        if scenario.method not in ("GET", "POST"):
            command.append(f"--header=:method: {scenario.method}")
        if scenario.body is not None:
            body = workdir / "h2load-body.bin"
            body.write_bytes(scenario.body)
            command.append(f"--data={body}")  # h2load posts it (the method is POST)
        if scenario.content_type:
            command.append(f"--header=content-type: {scenario.content_type}")
        # the Target's URL: https for h1-tls and h2 (ALPN: h2load's default list, h2
        # first, for h2; --h1 pins http/1.1), http for h1 and h2c (prior knowledge)
        if target.paths:
            command.append(f"--input-file={write_random_urls(target, step, workdir)}")
        else:
            command.append(target.url)
        return [command]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        connections, streams = self.shape(step)
        result = parse_h2load(text, read_log(request_log_path(step, workdir)))
        shape = dataclasses.replace(
            result.figures, connections=connections, streams_per_connection=streams
        )
        return dataclasses.replace(result, figures=shape)

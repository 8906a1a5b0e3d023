"""TLS handshakes per second: every request on a new connection, resumption off or on.

Each step runs one client process (`python -m drivers.handshakes`) with `step.offered`
clients side by side (threads: OpenSSL's handshake and the socket calls run without the
GIL; one process, so the step's counts, percentiles and resumed share are its own, not
sums of several). Each client is a loop of: connect, TLS 1.3 handshake (ALPN http/1.1,
the server's certificate verified against the run's CA), `GET /` with `Connection:
close`, the whole reply read, close. A 2xx reply is one good handshake; the step's rate
is handshakes per second. With resumption (`tls_resumption = true`) each connection
offers the session ticket its client's last connection received, and the process counts
how many the server resumed (`figures.resumed`, `resumed_fraction`): a server that
issues no tickets, or ignores them, answers with full handshakes, and that is its
figure. The reply is read to its end because TLS 1.3 sends its tickets after the
handshake: a client that closes first never has one to offer.

Why not the tools at hand (each tried on loopback against nginx, see docs/results.md):
- `openssl s_time -new / -reuse -time S` runs one connection at a time and reports its
  wall time in whole seconds, stopping between S and S + 1 s after it started (its
  deadline is `time(NULL) + S`): a 2 s run prints "3 real seconds", so its rate is off
  by up to 50 % on the short steps a run has. Its other figure is per second of its own
  user CPU. Without `-www` its `-reuse` resumes nothing under TLS 1.3 (the tickets
  arrive after the handshake).
- `h2load` with one request per connection: it does not resume sessions, and
  `-H "Connection: close"` in timing mode stalls it (h2load 1.52 reopened nothing and
  never ended), so it measures neither.
Python's `ssl` is OpenSSL: the handshake's work (the key exchange, the certificate
check) is the same C code; the loop around it costs the client CPU, which the monitor
watches (a step that fills the load CPUs is `driver_bound`, as for any driver). Measured
side by side against nginx on this 2-core host (loaded by other work): `s_time -new -www /
-time 2` made 314 connections and said "3 real seconds" (105–157/s: it cannot say which),
using 1.3 ms of its CPU per connection without checking the certificate; one client here
made 143 in 2.02 s (71/s), 2.7 ms of CPU each with the check. A client costs more than
s_time, so a step's concurrency runs several, and `driver_bound` says when they were the
limit.

With `tls_resumption = "both"` (the `handshakes` profile) each step measures both, one
after the other in one process: full handshakes for the first half of the step, then
resumed ones for the second half. The step's figures are the full handshakes (its rate
the full handshakes per second); `figures.resumed_per_s`, `figures.resumed_run_fraction`
(the share of the second half's connections the server did resume) and
`figures.resumption_speedup` (resumed over full rate) are the second half's.

The latency figures are each connection's time from `connect()` to the end of its
reply (histogram `latency`); `figures.handshake_ms` (`p50`...) is from `connect()` to the
end of the TLS handshake alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Self

from drivers import histograms as hdr
from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep
from model.step_figures import StepFigures
from servers.contract import ALPN_FOR_PROTOCOL, PROTOCOL_H1_TLS

REPORT_PREFIX = "HANDSHAKES_JSON "
READ_CHUNK_BYTES = 65536


def client_context(ca_path: str | None) -> ssl.SSLContext:
    """A TLS 1.3 client context that verifies the server against `ca_path` (the system's
    CAs when None) and offers ALPN http/1.1."""
    context = ssl.create_default_context(cafile=ca_path)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.set_alpn_protocols([ALPN_FOR_PROTOCOL[PROTOCOL_H1_TLS]])
    return context


def error_kind(error: BaseException) -> str:
    """The harness's error kind (drivers.base) for one connection's failure."""
    if isinstance(error, ConnectionRefusedError):
        return "connect"
    if isinstance(error, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(error, ConnectionResetError | BrokenPipeError):
        return "reset"
    if isinstance(error, ssl.SSLError):
        return "other"  # the handshake itself failed (a certificate, a protocol)
    if isinstance(error, OSError):
        return "read"
    return "other"


class Connection(NamedTuple):
    """What one connection did, read before it closed."""

    status: int  # the reply's status (0: none could be read)
    handshake_s: float  # connect() to the end of the TLS handshake
    ended_s: float  # connect() to the end of the reply
    resumed: bool  # the server resumed the offered session
    alpn: str  # what the server selected ("": nothing)
    session: ssl.SSLSession | None  # the ticket the reply brought, to offer next


def one_connection(
    host: str,
    port: int,
    context: ssl.SSLContext,
    request: bytes,
    timeout_s: float,
    session: ssl.SSLSession | None,
) -> Connection:
    """One connection: connect, handshake (offering `session`), one request, its reply."""
    began = time.perf_counter()
    raw = socket.create_connection((host, port), timeout=timeout_s)
    try:
        tls = context.wrap_socket(raw, server_hostname=host, session=session)
    except BaseException:
        raw.close()
        raise
    with tls:
        handshake_s = time.perf_counter() - began
        tls.sendall(request)
        reply = bytearray()
        while chunk := tls.recv(READ_CHUNK_BYTES):
            reply += chunk
        ended_s = time.perf_counter() - began
        resumed, alpn, next_session = tls.session_reused, tls.selected_alpn_protocol(), tls.session
    head = bytes(reply[:32]).split(b" ", 2)
    status = int(head[1]) if len(head) > 1 and head[1].isdigit() else 0
    return Connection(status, handshake_s, ended_s, bool(resumed), alpn or "", next_session)


@dataclass
class Tally:
    """What the clients counted, shared (under `lock`) by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies_us: Counter[int] = field(default_factory=Counter)
    handshakes_us: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    ok: int = 0
    resumed: int = 0
    alpn: set[str] = field(default_factory=set)


def client_loop(
    args: argparse.Namespace, context: ssl.SSLContext, deadline: float, stop: threading.Event,
    tally: Tally,
) -> None:  # fmt: skip
    """One client: connections one after another until `deadline` or `stop`."""
    host = f"[{args.host}]" if ":" in args.host else args.host
    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: {host}:{args.port}\r\nConnection: close\r\n\r\n"
    ).encode()
    session: ssl.SSLSession | None = None
    while time.perf_counter() < deadline and not stop.is_set():
        try:
            done = one_connection(args.host, args.port, context, request, args.timeout_s, session)
        except Exception as error:  # counted by kind; the loop goes on to its deadline
            with tally.lock:
                tally.errors[error_kind(error)] += 1
            continue
        if args.resumption:
            session = done.session
        with tally.lock:
            tally.resumed += int(done.resumed)
            tally.alpn.add(done.alpn)
            tally.latencies_us[round(done.ended_s * 1e6)] += 1
            tally.handshakes_us[round(done.handshake_s * 1e6)] += 1
            if 200 <= done.status < 300:
                tally.ok += 1
            else:
                tally.errors["status"] += 1


def run_clients(args: argparse.Namespace, stop: threading.Event) -> dict[str, Any]:
    """`args.clients` clients side by side (threads: the handshake and the socket calls
    release the GIL) for `args.duration_s`, or until `stop` is set; the report as a dict."""
    context = client_context(args.ca)
    tally = Tally()
    began = time.perf_counter()
    deadline = began + args.duration_s
    threads = [
        threading.Thread(target=client_loop, args=(args, context, deadline, stop, tally))
        for _ in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    duration_s = time.perf_counter() - began
    latencies, handshakes = tally.latencies_us, tally.handshakes_us
    return {
        "replies": tally.ok,
        "duration_s": round(duration_s, 6),
        "clients": args.clients,
        "errors": dict(tally.errors),
        "resumed": tally.resumed,
        "resumption": bool(args.resumption),
        "alpn": sorted(tally.alpn),
        "latency": hdr.encode(hdr.histogram_of_counts(latencies)) if latencies else None,
        "handshake": hdr.encode(hdr.histogram_of_counts(handshakes)) if handshakes else None,
    }


def parse_handshakes(text: str) -> DriverResult:
    """The handshakes client's report line as a result; DriverOutputError without one.

    `negotiated` is h1-tls when the server selected ALPN http/1.1 on every connection,
    None when it selected none (an ALPN-less server: nothing to check); another protocol
    is refused by run_step's check. A second report line (resumption "both") is the
    resumed half: its rate, resumed share and speed-up go into its `figures`.
    """
    reports = [
        json.loads(line[len(REPORT_PREFIX) :])
        for line in text.splitlines()
        if line.startswith(REPORT_PREFIX)
    ]
    if not reports:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        raise DriverOutputError(
            f"the handshakes client gave no report: {lines[-1] if lines else '(no output)'}"
        )
    result = _result_of(reports[0])
    if len(reports) < 2:
        return result
    resumed = _result_of(reports[1])
    handshakes = resumed.figures.handshakes
    resumed_count = resumed.figures.resumed or 0
    figures = dataclasses.replace(
        result.figures,
        resumed_per_s=round(resumed.rate, 1),
        resumed_run_fraction=round(resumed_count / handshakes, 4) if handshakes else None,
        resumption_speedup=round(resumed.rate / result.rate, 3) if result.rate else None,
        # every reply of the step's window, both halves: the server's CPU over the window
        # is spent on them all (harness.run.http_case divides it by this)
        window_replies=result.replies + resumed.replies,
    )
    return dataclasses.replace(result, figures=figures)


def _result_of(report: dict[str, Any]) -> DriverResult:
    """One report line (one run of the clients) as a result."""
    errors = {kind: int(n) for kind, n in report["errors"].items()}
    replies = int(report["replies"])
    duration_s = float(report["duration_s"])
    histograms: dict[str, str] = {}
    latency = no_latency()
    handshakes = replies + errors.get("status", 0)
    resumed = int(report["resumed"])
    if report["latency"] is not None:
        histograms["latency"] = report["latency"]
        latency = hdr.latency_ms(hdr.decode(report["latency"]))
    handshake_ms = None
    if report["handshake"] is not None:
        handshake_ms = hdr.latency_ms(hdr.decode(report["handshake"]))
    alpn = set(report["alpn"])
    negotiated = None
    if alpn and alpn != {""}:
        if alpn != {ALPN_FOR_PROTOCOL[PROTOCOL_H1_TLS]}:
            raise DriverOutputError(f"the server selected ALPN {sorted(alpn)}, not http/1.1")
        negotiated = PROTOCOL_H1_TLS
    return DriverResult(
        replies=replies,
        duration_s=duration_s,
        errors=errors,
        latency_ms=latency,
        achieved=replies / duration_s if duration_s > 0 else 0.0,
        figures=StepFigures(
            handshakes=handshakes,
            resumed=resumed,
            resumed_fraction=round(resumed / handshakes, 4) if handshakes else None,
            handshake_ms=handshake_ms,
        ),
        histograms=histograms,
        negotiated=negotiated,
    )


class HandshakesDriver:
    """Closed loop of new connections: `step.offered` clients side by side, each opening
    one connection after another for `step.duration_s`, full or resumed handshakes."""

    name = "handshakes"
    tool = "python"  # `python -m drivers.handshakes`: ships with the harness
    package = None
    tool_version_args = ("--version",)
    ramp_kinds = ("concurrency",)
    protocols = (PROTOCOL_H1_TLS,)
    ca_trusted = True  # every handshake verifies the certificate against the run's CA
    stop_signal = signal.SIGINT  # ends the loop after its connection; the report follows
    busy_polls = False
    checks_bodies = False

    def __init__(self, resumption: bool | str = False) -> None:
        self.resumption = resumption  # True, False, or "both" (full, then resumed)

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        resumption = options.get("tls_resumption") or False
        return cls(resumption=resumption if resumption == "both" else bool(resumption))

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        if target.protocol not in self.protocols:
            raise ValueError(
                f"the handshakes driver speaks {PROTOCOL_H1_TLS} only, not {target.protocol}"
            )
        if not step.duration_s:
            raise ValueError("a handshakes step needs a duration")
        command = [
            sys.executable,
            "-m",
            "drivers.handshakes",
            "--host", target.host,
            "--port", str(target.port),
            "--path", target.scenario.path,
            "--duration-s", f"{step.duration_s:g}",
            "--timeout-s", f"{target.timeout_s:g}",
            "--clients", str(max(1, int(step.offered))),
        ]  # fmt: skip
        if target.ca_path is not None:
            command += ["--ca", str(target.ca_path)]
        if self.resumption == "both":
            command += ["--resumption", "both"]
        elif self.resumption:
            command += ["--resumption", "on"]
        return [command]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_handshakes(text)


def main(argv: list[str] | None = None) -> int:
    """`python -m drivers.handshakes`: one client's loop, its report on one stdout line."""
    parser = argparse.ArgumentParser(prog="python -m drivers.handshakes")
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--duration-s", type=float, required=True)
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--ca", default=None, help="the CA to trust (default: the system's)")
    parser.add_argument("--clients", type=int, default=1, help="clients side by side")
    parser.add_argument(
        "--resumption",
        choices=("off", "on", "both"),
        default="off",
        help="offer the last session; both: half the time without, then half with",
    )
    parser.add_argument("--version", action="version", version=ssl.OPENSSL_VERSION)
    args = parser.parse_args(argv)
    stop = threading.Event()
    # the watchdog's stop signal (drivers.base): finish the connection, then report
    signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    halves = (False, True) if args.resumption == "both" else (args.resumption == "on",)
    duration_s = args.duration_s / len(halves)
    for resumption in halves:  # "both": full handshakes, then resumed, a report each
        run = argparse.Namespace(**{**vars(args), "resumption": resumption})
        run.duration_s = duration_s
        report = run_clients(run, stop)
        sys.stdout.write(REPORT_PREFIX + json.dumps(report, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What one hostile HTTP/2 connection costs a server: verify's attack checks.

Each attack is one connection after a valid preface, writing frames that cost the client
nothing and the server work without progress, bounded in time (`ATTACK_S`) and bytes
(`ATTACK_MAX_BYTES`): rapid reset (CVE-2023-44487), a CONTINUATION flood, PING and
SETTINGS floods never read, empty DATA frames, WINDOW_UPDATE and PRIORITY floods. Each
records what the server did (a GOAWAY and its code, a close, a reset, or it stopped
reading), the CPU seconds and RSS growth of its process tree meanwhile, and whether a
second client was served during the attack and after it.

A server is bounded when it ended the connection, or spent less than
`ATTACK_CPU_SHARE` of the attack's wall time in CPU and grew its RSS by less than
`ATTACK_RSS_LIMIT_BYTES`; and it served the second client during the attack. One that is
not is a failure for our servers and the baselines, and a deviation (a warning naming the
attack and the figure) for a server given as a command, which a servers file may declare.
A server that no longer serves a new connection after the attack fails, whoever it is.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from h2.exceptions import H2Error

from harness.verify.endpoint import CheckFunction, Endpoint, EndpointOrUrl, endpoint_of
from harness.verify.failure import CheckFailed, fail
from harness.verify.flood import Flood, FloodResult, ServerWatch, flood
from harness.verify.h2 import error_name
from harness.verify.h2wire import (
    FRAME_CONTINUATION,
    FRAME_DATA,
    FRAME_HEADERS,
    FRAME_PING,
    FRAME_PRIORITY,
    FRAME_RST_STREAM,
    FRAME_SETTINGS,
    FRAME_WINDOW_UPDATE,
    PREFACE,
    h2_exchange,
    h2_frame,
    open_h2_socket,
)
from harness.verify.severity import Outcome, judge_rule, with_deviations
from servers import FRAMEWORKS, contract

ATTACK_S = 3.0  # how long each attack writes, at most
ATTACK_MAX_BYTES = 128 * 2**20  # and how much
# Bounded: under a quarter of the attack's wall time in CPU (2 s of an 8 s attack), and
# less RSS growth than this.
ATTACK_CPU_SHARE = 0.25
ATTACK_RSS_LIMIT_BYTES = 64 * 2**20
SECOND_CLIENT_WAIT_S = 5.0  # the second client's request, during the attack and after

END_HEADERS = 0x4
END_STREAM = 0x1
CANCEL = 0x8
# The check's own header fields with HPACK's literal-without-indexing form (RFC 7541
# §6.2.2): no dynamic table, so each header block stands alone.
FLOOD_FIELD = (b"x-flood", b"a" * 100)


def _literal(name: bytes, value: bytes) -> bytes:
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


def request_block(endpoint: Endpoint, method: str, path: str = contract.ROUTE_TEXT) -> bytes:
    """A header block of `method path` on `endpoint` (each field a literal)."""
    fields = (
        (b":method", method.encode()),
        (b":scheme", b"https" if endpoint.tls else b"http"),
        (b":authority", f"{endpoint.host}:{endpoint.port}".encode()),
        (b":path", path.encode()),
    )
    return b"".join(_literal(name, value) for name, value in fields)


def _stream(i: int) -> int:
    return 2 * i + 1  # the client's streams are odd


def _rapid_reset(endpoint: Endpoint) -> Flood:
    block = request_block(endpoint, "GET")

    def unit(i: int) -> bytes:
        headers = h2_frame(
            FRAME_HEADERS, block, flags=END_HEADERS | END_STREAM, stream_id=_stream(i)
        )
        return headers + h2_frame(FRAME_RST_STREAM, CANCEL.to_bytes(4), stream_id=_stream(i))

    return Flood(b"", unit, reads=True, units_per_batch=256)


def _continuation_flood(endpoint: Endpoint) -> Flood:
    opening = h2_frame(FRAME_HEADERS, request_block(endpoint, "GET"), flags=END_STREAM, stream_id=1)
    continuation = h2_frame(FRAME_CONTINUATION, _literal(*FLOOD_FIELD), stream_id=1)
    return Flood(opening, lambda i: continuation, reads=True)


def _constant(frame: bytes, reads: bool) -> Flood:
    return Flood(b"", lambda i: frame, reads=reads)


def _empty_data(endpoint: Endpoint) -> Flood:
    opening = h2_frame(
        FRAME_HEADERS, request_block(endpoint, "POST"), flags=END_HEADERS, stream_id=1
    )
    return Flood(opening, lambda i: h2_frame(FRAME_DATA, b"", stream_id=1), reads=True)


def _priority(i: int) -> bytes:
    # an idle stream's priority: depends on stream 0, weight 16 (RFC 9113 §6.3)
    return h2_frame(FRAME_PRIORITY, bytes(4) + bytes([15]), stream_id=_stream(i + 1))


@dataclass(frozen=True)
class Attack:
    """One attack: what it writes, in words, and what each of its units is called."""

    sent: str
    units: str
    flood: Callable[[Endpoint], Flood]


ATTACKS: dict[str, Attack] = {
    "h2-rapid-reset": Attack(
        "HEADERS (GET /) then RST_STREAM (CANCEL) on each new stream, repeated",
        "streams reset",
        _rapid_reset,
    ),
    "h2-continuation-flood": Attack(
        "HEADERS without END_HEADERS, then 110-byte CONTINUATION frames without end",
        "CONTINUATION frames",
        _continuation_flood,
    ),
    "h2-ping-flood": Attack(
        "PING frames, their ACKs never read",
        "PINGs",
        lambda _: _constant(h2_frame(FRAME_PING, b"floodpng"), reads=False),
    ),
    "h2-settings-flood": Attack(
        "empty SETTINGS frames, their ACKs never read",
        "SETTINGS",
        lambda _: _constant(h2_frame(FRAME_SETTINGS), reads=False),
    ),
    "h2-empty-data": Attack(
        "HEADERS (POST /) then empty DATA frames without END_STREAM",
        "empty DATA frames",
        _empty_data,
    ),
    "h2-window-update-flood": Attack(
        "WINDOW_UPDATE frames of 1 on the connection",
        "WINDOW_UPDATEs",
        lambda _: _constant(h2_frame(FRAME_WINDOW_UPDATE, (1).to_bytes(4)), reads=True),
    ),
    "h2-priority-flood": Attack(
        "PRIORITY frames on ever new idle streams",
        "PRIORITY frames",
        lambda _: Flood(b"", _priority, reads=True),
    ),
}


class SecondClient:
    """A `GET /` on a connection of its own, in a thread: answered 200, and how fast."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.served: bool | None = None  # None: not asked yet
        self.asked_at_s: float | None = None  # seconds into the attack it was asked
        self.latency_ms: float | None = None
        self.came = ""
        self.thread: threading.Thread | None = None

    def ask(self) -> None:
        """`GET /` now, answered 200 with the contract's body within SECOND_CLIENT_WAIT_S."""
        start = time.monotonic()
        try:
            response = h2_exchange(
                self.endpoint, "GET", contract.ROUTE_TEXT, timeout_s=SECOND_CLIENT_WAIT_S
            )
        except (CheckFailed, H2Error, OSError) as error:
            self.served, self.came = False, f"{type(error).__name__}: {error}"[:200]
            return
        self.latency_ms = (time.monotonic() - start) * 1000
        self.served = response.status == 200 and response.body == contract.TEXT_BODY
        self.came = f"status {response.status}"

    def start(self, elapsed_s: float | None = None) -> None:
        """Ask in a thread (once); `elapsed_s`: how far into the attack (None: after it)."""
        if self.thread is None:
            self.asked_at_s = elapsed_s
            self.thread = threading.Thread(target=self.ask, daemon=True)
            self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(SECOND_CLIENT_WAIT_S * 3)


@dataclass(frozen=True)
class AttackReport:
    """One attack's figures: what the server did, what it cost, who else was served."""

    result: FloodResult
    window_s: float  # the attack, the reading after it and the second client after it
    cpu_s: float | None  # None: the server's processes are not visible to this user
    rss_growth_bytes: int | None
    served_during: bool
    during_ms: float | None
    asked_during: bool  # the second client came while the attack ran (else right after)
    served_after: bool
    after_came: str

    @property
    def cpu_limit_s(self) -> float:
        return ATTACK_CPU_SHARE * self.window_s

    @property
    def bounded(self) -> bool:
        """Ended the connection, or stayed within the CPU and RSS limits."""
        if self.result.ended:
            return True
        cpu_ok = self.cpu_s is None or self.cpu_s < self.cpu_limit_s
        rss_ok = self.rss_growth_bytes is None or self.rss_growth_bytes < ATTACK_RSS_LIMIT_BYTES
        return cpu_ok and rss_ok

    def figures(self) -> dict[str, object]:
        """The figures as verify's JSON records them."""
        result = self.result
        return {
            "ending": result.ending,
            "goaway_code": result.goaway_code,
            "units_sent": result.units_sent,
            "bytes_sent": result.bytes_sent,
            "attack_s": round(result.duration_s, 3),
            "window_s": round(self.window_s, 3),
            "cpu_s": None if self.cpu_s is None else round(self.cpu_s, 3),
            "rss_growth_bytes": self.rss_growth_bytes,
            "served_during": self.served_during,
            "during_ms": None if self.during_ms is None else round(self.during_ms, 1),
            "asked_during": self.asked_during,
            "served_after": self.served_after,
        }


def ending_text(result: FloodResult, units: str) -> str:
    """`GOAWAY ENHANCE_YOUR_CALM, seen after writing 13,400 streams reset (0.8 s)`: what
    the server did, and how much the client had written by the time it saw it (a flood
    never read writes on into the buffers after the server's GOAWAY)."""
    seen = f"seen after writing {result.units_sent:,} {units} ({result.duration_s:.1f} s)"
    if result.goaway_code is not None:
        return f"GOAWAY {error_name(result.goaway_code)}, {seen}"
    what = {"closed": "closed", "reset": "reset", "stopped-reading": "stopped reading"}
    return f"{what.get(result.ending, 'kept open')}, {seen}"


def report_text(report: AttackReport, units: str) -> str:
    """The attack's figures in one line."""
    cost = (
        "server CPU and RSS not measured (its processes are not visible)"
        if report.cpu_s is None or report.rss_growth_bytes is None
        else f"server {report.cpu_s:.2f} s CPU in {report.window_s:.1f} s, "
        f"RSS +{report.rss_growth_bytes / 2**20:.1f} MiB"
    )
    when = "during" if report.asked_during else "right after the end"
    during = (
        f"a second client served {when} ({report.during_ms:.0f} ms)"
        if report.served_during and report.during_ms is not None
        else f"a second client not served {when}"
    )
    after = "served after" if report.served_after else "not served after"
    return f"{ending_text(report.result, units)}; {cost}; {during}; {after}"


def run_attack(endpoint: Endpoint, attack: Attack, duration_s: float) -> AttackReport:
    """Run `attack` on one connection for `duration_s` at most, watching the server."""
    watch = ServerWatch(endpoint.port)
    during = SecondClient(endpoint)

    def on_tick(elapsed_s: float) -> None:
        watch.sample()
        if elapsed_s >= duration_s / 2:
            during.start(elapsed_s)

    start = time.monotonic()
    with open_h2_socket(endpoint) as sock:
        sock.sendall(PREFACE + h2_frame(FRAME_SETTINGS))
        result = flood(sock, attack.flood(endpoint), duration_s, ATTACK_MAX_BYTES, on_tick)
    during.start()  # an attack ended before half its time: ask now
    during.join()
    after = SecondClient(endpoint)
    after.ask()
    measured = watch.found
    return AttackReport(
        result=result,
        window_s=time.monotonic() - start,
        cpu_s=watch.cpu_used_s() if measured else None,
        rss_growth_bytes=watch.rss_growth_bytes() if measured else None,
        served_during=bool(during.served),
        during_ms=during.latency_ms,
        asked_during=during.asked_at_s is not None,
        served_after=bool(after.served),
        after_came=after.came,
    )


def check_h2_attack(
    server: EndpointOrUrl, key: str, framework: str = "", duration_s: float = ATTACK_S
) -> str | Outcome:
    """Attack `key` on one connection for `duration_s` at most: the server bounded (see
    the module's docstring) and serving a new connection after (`judge_attack`)."""
    endpoint = endpoint_of(server)
    return judge_attack(key, run_attack(endpoint, ATTACKS[key], duration_s), framework)


def judge_attack(key: str, report: AttackReport, framework: str = "") -> Outcome:
    """What `report` of attack `key` weighs: a server that stopped serving fails; one
    not bounded fails if it is ours or a baseline, and is a deviation (a warning unless
    declared) for a server given as a command or unnamed. The figures go with it."""
    attack = ATTACKS[key]
    detail = report_text(report, attack.units)
    sent = f"one connection: {attack.sent}, for {report.result.duration_s:.1f} s"
    expected = (
        f"the connection ended, or under {ATTACK_CPU_SHARE:.0%} of the time in CPU and "
        f"{ATTACK_RSS_LIMIT_BYTES // 2**20} MiB RSS growth; a second client served during"
    )
    if not report.served_after:
        fail(
            sent=f"GET / on a new connection after {sent}",
            expected="200 with the contract's body: still serving",
            came=f"{report.after_came} ({detail})",
            figures=report.figures(),
        )
    held = report.bounded and report.served_during
    info = FRAMEWORKS.get(framework)
    if not held and info is not None and info.kind != "command":
        fail(sent=sent, expected=expected, came=detail, figures=report.figures())
    deviation = judge_rule(
        key, key, held, sent=sent, expected=expected, came=detail, framework=framework
    )
    said = with_deviations(detail, [deviation])
    if isinstance(said, Outcome):
        return Outcome(said.detail, said.deviations, report.figures())
    return Outcome(said, (), report.figures())


def attack_checks(framework: str = "", duration_s: float = ATTACK_S) -> dict[str, CheckFunction]:
    """Every attack check, judged for `framework`."""
    return {
        key: functools.partial(check_h2_attack, key=key, framework=framework, duration_s=duration_s)
        for key in ATTACKS
    }

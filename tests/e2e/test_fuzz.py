"""The fuzz suite: Hypothesis draws raw HTTP requests, `/log` requests and
WebSocket frame scripts (tests/fuzz_strategies.py) and sends them to every server,
baselines included, each on the routes it serves, with the slow-client deadlines at
CLIENT_TIMEOUT_S and a file sink where the server stores records. Every server that
speaks HTTP/2 (h2 over TLS, h2c) is also sent random frame sequences after a valid
preface and SETTINGS, then a PING: it answers the PING, or sends GOAWAY, or closes, within
ANSWER_BOUND_S, and then still serves `/` over HTTP/2 on a new connection.

After every example: the server process is alive; a complete input was answered, or its
connection closed, within ANSWER_BOUND_S (an incomplete one gets INCOMPLETE_WAIT_S, then
the client closes it); no answer is a server error (a 5xx other than 501 and 505, a
WebSocket close other than the ones the script earns); the server still serves `/`; and
the sink holds no more records than the well-formed `/log` requests it acknowledged and
the valid `/ws` messages it was sent. At the end SIGTERM stops it with exit status 0.

Two profiles: "fuzz-ci" in the default session (derandomized: every run, and every
server, gets the same inputs) and "fuzz-long", many more examples, marked slow
(`pytest -m slow tests/e2e/test_fuzz.py`). No example database is written.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.server_process import ServerProcess, start_server
from harness.services.sink_store import SinkStore
from harness.tls import make_certificates
from harness.verify import Endpoint, _responses, endpoint_for, read_until_close
from harness.verify.h2wire import (
    FRAME_GOAWAY,
    FRAME_PING,
    FRAME_SETTINGS,
    PREFACE,
    RawFrame,
    h2_frame,
    open_h2_socket,
    read_raw_frames,
)
from harness.verify.wire import expect_still_serving
from servers import FRAMEWORKS, contract
from tests.fuzz_strategies import (
    CLOSING_FLAWS,
    H2_PING,
    H2Script,
    HttpInput,
    LogRequest,
    WsScript,
    h2_scripts,
    http_inputs,
    log_batches,
    ws_scripts,
)
from tests.helpers import (
    assert_still_serving,
    raw_ws_close_code,
    raw_ws_connect,
    require_framework,
)

CLIENT_TIMEOUT_S = 1.0  # --client-timeout-s: both slow-client deadlines
# A complete input must be answered or closed within this; the slow-client deadline is
# not needed for that (a server answers a whole request at once), but once it is in,
# a request a server judged incomplete is closed by 2 × CLIENT_TIMEOUT_S plus a sweep.
ANSWER_BOUND_S = 4.0
# How long an incomplete input waits for an early refusal before the client gives up.
INCOMPLETE_WAIT_S = 0.3
SEND_PAUSE_S = 0.002  # between the pieces of a WebSocket stream: separate TCP segments
# 501 (a transfer coding or method not implemented) and 505 (an HTTP version not
# supported) are the RFC's refusals; any other 5xx is the server failing.
REFUSING_5XX = (501, 505)
INTERIM_STATUSES = (100, 102, 103)  # a final answer follows them (101 switches instead)
_STATUS_LINE = re.compile(rb"HTTP/\d\.\d (\d\d\d)")

_COMMON: dict[str, Any] = {
    "deadline": None,  # one example waits up to ANSWER_BOUND_S by design
    "database": None,  # nothing written under .hypothesis/
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
settings.register_profile("fuzz-ci", max_examples=40, derandomize=True, **_COMMON)
# HTTP/2 frames: fewer in the default session (each server over h2 and h2c)
settings.register_profile("fuzz-h2-ci", max_examples=15, derandomize=True, **_COMMON)
# not derandomized: each long run draws new inputs; a failure prints the blob that replays it
settings.register_profile("fuzz-long", max_examples=400, print_blob=True, **_COMMON)
FUZZ_CI = settings.get_profile("fuzz-ci")
FUZZ_H2_CI = settings.get_profile("fuzz-h2-ci")
FUZZ_LONG = settings.get_profile("fuzz-long")
LONG_TIMEOUT_S = 1800  # per test under fuzz-long (pyproject's default is 120 s)


@dataclass
class Fuzzed:
    """One server under the fuzzer: its file sink (None when it serves no `/log`), how
    many records that sink may hold, and how many examples each property sent it."""

    server: ServerProcess
    store: SinkStore | None
    records_allowed: int = 0
    examples: Counter[str] = field(default_factory=Counter)

    def serves(self, route: str) -> bool:
        return FRAMEWORKS[self.server.framework].serves(route)

    def stored(self) -> int:
        return 0 if self.store is None else self.store.count() or 0


@pytest.fixture(scope="module", params=sorted(FRAMEWORKS))
def fuzzed(request: pytest.FixtureRequest) -> Iterator[Fuzzed]:
    """Each server with the slow-client deadlines at CLIENT_TIMEOUT_S and, where it stores
    records, a file sink; stopped with SIGTERM at the end, which must exit 0."""
    name = request.param
    require_framework(name)
    timeout_args = ["--client-timeout-s", str(CLIENT_TIMEOUT_S)]
    with contextlib.ExitStack() as stack:
        store = None
        if FRAMEWORKS[name].serves(contract.ROUTE_LOG):
            store = stack.enter_context(SinkStore("file"))
            server = start_server(
                name, sink="file", extra_args=[*store.server_args(), *timeout_args]
            )
        else:
            server = start_server(name, extra_args=timeout_args)
        fuzzed = Fuzzed(server, store)
        try:
            yield fuzzed
        finally:
            status = server.stop()
        print(f"\nfuzzed {name}: {dict(fuzzed.examples)} examples")
        assert status == 0, f"{name} exited {status} on SIGTERM: {server.stderr_tail()}"


def _fuzz(profile: settings, strategy: st.SearchStrategy[Any], check: Callable[[Any], None]):
    """Run `check` on `strategy`'s examples under `profile` (Hypothesis's own loop, with
    shrinking: a failure is reported as its smallest input)."""

    @profile
    @given(strategy)
    def example(drawn: Any) -> None:
        check(drawn)

    example()


# -- what every example ends with -------------------------------------------------------
def _assert_alive_and_serving(fuzzed: Fuzzed) -> None:
    server = fuzzed.server
    assert server.process.poll() is None, f"the server died: {server.stderr_tail()}"
    assert_still_serving(server)


def _assert_records_allowed(fuzzed: Fuzzed) -> None:
    stored = fuzzed.stored()
    if stored > fuzzed.records_allowed and fuzzed.store is not None:
        newest = fuzzed.store.records(stored)[fuzzed.records_allowed :]
        raise AssertionError(
            f"{stored} records stored, {fuzzed.records_allowed} allowed; the extra: "
            + "; ".join(repr(record)[:300] for record in newest[:3])
        )


# -- reading answers --------------------------------------------------------------------
def _statuses(reply: bytes) -> list[int] | None:
    """The statuses of the reply's heads up to its first final one; None while that
    head has not fully arrived. A reply that is not HTTP/1.x (HTTP/0.9's bare body) is
    an answer too: []."""
    if not reply.startswith(b"HTTP/"):
        return [] if reply else None
    statuses = []
    rest = reply
    while b"\r\n\r\n" in rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        matched = _STATUS_LINE.match(head)
        if matched is None:
            return statuses
        statuses.append(int(matched.group(1)))
        if statuses[-1] not in INTERIM_STATUSES:
            return statuses
    return None


def _await_answer(sock: socket.socket, bound_s: float) -> tuple[bytes, bool]:
    """Read until a final answer's head is in, the server closes, or `bound_s` passes:
    (what came, whether the server closed)."""
    deadline = time.monotonic() + bound_s
    reply = b""
    while (remaining_s := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining_s)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return reply, True
        if not chunk:
            return reply, True
        reply += chunk
        if _statuses(reply) is not None:
            return reply, False
    return reply, False


def _send(sock: socket.socket, data: bytes) -> bool:
    """Send all of `data`; False when the server closed (or stopped reading) first."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        return False
    return True


def _assert_no_server_error(reply: bytes) -> None:
    failed = [s for s in _statuses(reply) or [] if s >= 500 and s not in REFUSING_5XX]
    assert not failed, f"a server error: {reply[:200]!r}"


# -- HTTP requests to every route but /log -----------------------------------------------
def _check_http(fuzzed: Fuzzed, request: HttpInput) -> None:
    fuzzed.examples["http"] += 1
    bound_s = ANSWER_BOUND_S if request.complete else INCOMPLETE_WAIT_S
    with socket.create_connection(("127.0.0.1", fuzzed.server.port), timeout=bound_s) as sock:
        _send(sock, request.data)
        reply, closed = _await_answer(sock, bound_s)
    if request.complete:
        assert reply or closed, f"neither answered nor closed within {ANSWER_BOUND_S} s"
    _assert_no_server_error(reply)
    _assert_alive_and_serving(fuzzed)
    _assert_records_allowed(fuzzed)  # none of these is a /log request


def test_http_requests(fuzzed: Fuzzed) -> None:
    _fuzz(FUZZ_CI, http_inputs(), lambda request: _check_http(fuzzed, request))


@pytest.mark.slow
@pytest.mark.timeout(LONG_TIMEOUT_S)
def test_http_requests_long(fuzzed: Fuzzed) -> None:
    _fuzz(FUZZ_LONG, http_inputs(), lambda request: _check_http(fuzzed, request))


# -- /log requests: the well-formed stored once, the others never -------------------------
def _log_exchange(port: int, request: LogRequest) -> tuple[bytes, bool]:
    """Send one /log request on its own connection: (the reply, whether the server
    closed). A well-formed one's reply is read to the end of its body; a flawed one's
    until the server closes (after a refusal it must); a truncated one is half-closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_BOUND_S) as sock:
        _send(sock, request.data)
        if not request.complete:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
        reply, closed = _await_answer(sock, ANSWER_BOUND_S)
        if closed:
            return reply, True
        if request.well_formed:
            return reply + _rest_of_body(sock, reply), False
        sock.settimeout(ANSWER_BOUND_S)
        started = time.monotonic()
        reply += read_until_close(sock)
        return reply, time.monotonic() - started < ANSWER_BOUND_S


def _rest_of_body(sock: socket.socket, reply: bytes) -> bytes:
    head, _, body = reply.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    missing = (int(length.group(1)) if length else 0) - len(body)
    rest = b""
    sock.settimeout(ANSWER_BOUND_S)
    while len(rest) < missing and (chunk := sock.recv(65536)):
        rest += chunk
    return rest


def _check_log_batch(fuzzed: Fuzzed, batch: list[LogRequest]) -> None:
    fuzzed.examples["log"] += 1
    fuzzed.examples["log requests"] += len(batch)
    stored_before = fuzzed.stored()
    acknowledged = 0
    for request in batch:
        reply, closed = _log_exchange(fuzzed.server.port, request)
        statuses = _statuses(reply) or []
        final = statuses[-1] if statuses else None
        _assert_no_server_error(reply)
        if request.well_formed and request.refusable and final == 400:
            continue  # chunk extensions or trailers tornado's parser refuses: no record
        if request.well_formed:
            if final == 200:  # counted first: a failure below leaves the ledger right
                acknowledged += 1
                fuzzed.records_allowed += 1
            assert final == 200 and reply.endswith(b"\r\n\r\n" + contract.LOG_REPLY_BODY), (
                f"a well-formed /log request answered {reply[:200]!r}"
            )
            continue
        assert final != 200, f"{request.flaw}: acknowledged: {reply[:200]!r}"
        assert _responses(reply) <= 1, f"{request.flaw}: two answers: {reply[:300]!r}"
        if request.flaw in CLOSING_FLAWS:  # a refusal is one response, then the close
            assert closed, f"{request.flaw}: not closed after {reply[:200]!r}"
    if any(not r.well_formed for r in batch):
        time.sleep(0.15)  # a record wrongly taken reaches the file within 100 ms
    stored_now = fuzzed.stored()
    assert stored_now - stored_before >= acknowledged, "an acknowledged record is missing"
    _assert_records_allowed(fuzzed)
    _assert_alive_and_serving(fuzzed)


def test_a_header_value_that_is_not_utf8_is_stored_byte_for_byte(fuzzed: Fuzzed) -> None:
    """Found by the fuzzer: aiohttp answered 500 to a header value holding the byte 0x80
    (its header strings keep non-UTF-8 bytes as surrogates, which the record's JSON
    cannot encode). Every server now stores each header byte as one character."""
    if not fuzzed.serves(contract.ROUTE_LOG):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_LOG}")
    request = LogRequest(
        b"POST /log HTTP/1.1\r\nHost: x\r\nX-Bytes: \x80\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
        well_formed=True,
    )
    _check_log_batch(fuzzed, [request])
    stored = fuzzed.store.records(fuzzed.stored()) if fuzzed.store else []
    assert stored[-1]["headers"]["X-Bytes"] == "\x80\xc3\xa9", stored[-1]


# Found by the long profile: eventlet.wsgi read a chunk size with int(size, 16), which
# takes "0x5" and "+5", and skipped the line after a chunk's data unread, so "2" followed
# by five bytes stored two of them. Each was a record from a malformed request (and on a
# kept-alive connection, a way to smuggle one); our eventlet server now checks the framing
# lines (servers.frameworks.eventlet.StrictChunkFraming).
BROKEN_CHUNKS = {
    "size-0x5": b"0x5\r\nhello\r\n0\r\n\r\n",
    "size-plus-5": b"+5\r\nhello\r\n0\r\n\r\n",
    "data-overruns-size": b"2\r\nhello\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("case", sorted(BROKEN_CHUNKS))
def test_a_broken_chunk_is_never_a_record(fuzzed: Fuzzed, case: str) -> None:
    if not fuzzed.serves(contract.ROUTE_LOG):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_LOG}")
    head = b"POST /log HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    broken = LogRequest(head + BROKEN_CHUNKS[case], well_formed=False, flaw=case)
    _check_log_batch(fuzzed, [broken])


def test_log_requests(fuzzed: Fuzzed) -> None:
    if not fuzzed.serves(contract.ROUTE_LOG):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_LOG}")
    _fuzz(FUZZ_CI, log_batches(), lambda batch: _check_log_batch(fuzzed, batch))


@pytest.mark.slow
@pytest.mark.timeout(LONG_TIMEOUT_S)
def test_log_requests_long(fuzzed: Fuzzed) -> None:
    if not fuzzed.serves(contract.ROUTE_LOG):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_LOG}")
    _fuzz(FUZZ_LONG, log_batches(), lambda batch: _check_log_batch(fuzzed, batch))


# -- WebSocket frames after a valid handshake --------------------------------------------
def _closed_within(sock: socket.socket, bound_s: float) -> bool:
    """Whether the server closes `sock` within `bound_s` (what it sends meanwhile dropped)."""
    sock.settimeout(bound_s)
    started = time.monotonic()
    with contextlib.suppress(TimeoutError):
        read_until_close(sock)
    return time.monotonic() - started < bound_s


def _check_ws_script(fuzzed: Fuzzed, script: WsScript) -> None:
    fuzzed.examples["ws"] += 1
    fuzzed.records_allowed += script.messages  # first: a failure below leaves it right
    with raw_ws_connect(fuzzed.server.port) as sock:
        for index, piece in enumerate(script.sends):
            if index:
                time.sleep(SEND_PAUSE_S)
            if not _send(sock, piece):
                break  # closed on a refused frame before the rest of it went out
        bound_s = ANSWER_BOUND_S if script.complete else INCOMPLETE_WAIT_S
        code = raw_ws_close_code(sock, timeout_s=bound_s)
        closed = code is not None or _closed_within(sock, 1.0)
    if script.complete:
        assert closed, f"no close frame and no close within {ANSWER_BOUND_S} s"
        assert code in script.close_codes, (
            f"{script.flaw or 'a clean script'}: closed with {code}, "
            f"expected one of {sorted(script.close_codes, key=str)}"
        )
    else:
        assert code != 1011, "closed with 1011, an internal error"
    _assert_records_allowed(fuzzed)
    _assert_alive_and_serving(fuzzed)


def test_websocket_frames(fuzzed: Fuzzed) -> None:
    if not fuzzed.serves(contract.ROUTE_WEBSOCKET):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_WEBSOCKET}")
    _fuzz(FUZZ_CI, ws_scripts(), lambda script: _check_ws_script(fuzzed, script))


@pytest.mark.slow
@pytest.mark.timeout(LONG_TIMEOUT_S)
def test_websocket_frames_long(fuzzed: Fuzzed) -> None:
    if not fuzzed.serves(contract.ROUTE_WEBSOCKET):
        pytest.skip(f"{fuzzed.server.framework} does not serve {contract.ROUTE_WEBSOCKET}")
    _fuzz(FUZZ_LONG, ws_scripts(), lambda script: _check_ws_script(fuzzed, script))


# -- HTTP/2 frames after a valid preface, on every server that speaks h2 or h2c -------------
H2_CASES = [
    (name, protocol)
    for name, framework in sorted(FRAMEWORKS.items())
    for protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C)
    if protocol in framework.protocols
]


@dataclass
class H2Fuzzed:
    """One server under the HTTP/2 fuzzer, on one protocol."""

    server: ServerProcess
    endpoint: Endpoint
    examples: int = 0


@pytest.fixture(scope="module", params=H2_CASES, ids=[f"{n}-{p}" for n, p in H2_CASES])
def h2_fuzzed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[H2Fuzzed]:
    """Each HTTP/2 server with the slow-client deadlines at CLIENT_TIMEOUT_S, serving a
    throwaway certificate over h2; SIGTERM at the end must exit 0."""
    name, protocol = request.param
    require_framework(name)
    certificates = make_certificates(tmp_path_factory.mktemp("tls"))
    server = start_server(
        name,
        protocol=protocol,
        certificates=certificates,
        extra_args=["--client-timeout-s", str(CLIENT_TIMEOUT_S)],
    )
    fuzzed = H2Fuzzed(server, endpoint_for(server.url, protocol, certificates))
    try:
        yield fuzzed
    finally:
        status = server.stop()
    print(f"\nfuzzed {name} over {protocol}: {fuzzed.examples} frame scripts")
    assert status == 0, f"{name} exited {status} on SIGTERM: {server.stderr_tail()}"


def _h2_ended(frames: list[RawFrame]) -> bool:
    """Whether the server answered our PING (an ACK with its bytes) or sent GOAWAY."""
    return any(
        f.frame_type == FRAME_GOAWAY
        or (f.frame_type == FRAME_PING and f.flags & 0x1 and f.payload == H2_PING)
        for f in frames
    )


def _check_h2_script(fuzzed: H2Fuzzed, script: H2Script) -> None:
    fuzzed.examples += 1
    bound_s = ANSWER_BOUND_S if script.complete else INCOMPLETE_WAIT_S
    with open_h2_socket(fuzzed.endpoint, timeout_s=ANSWER_BOUND_S) as sock:
        sent = _send(sock, PREFACE + h2_frame(FRAME_SETTINGS))
        sent = sent and _send(sock, b"".join(script.frames) + h2_frame(FRAME_PING, H2_PING))
        frames, closed, _ = read_raw_frames(sock, _h2_ended, bound_s)
    assert not frames or frames[0].frame_type == FRAME_SETTINGS, f"first {frames[0]}"
    if script.complete:
        assert _h2_ended(frames) or closed or not sent, (
            f"no PING ACK, GOAWAY or close within {ANSWER_BOUND_S} s: "
            f"{[(f.frame_type, f.flags, f.stream_id) for f in frames][:8]}"
        )
    server = fuzzed.server
    assert server.process.poll() is None, f"the server died: {server.stderr_tail()}"
    expect_still_serving(fuzzed.endpoint, "HTTP/2 frames")


def test_h2_frames(h2_fuzzed: H2Fuzzed) -> None:
    _fuzz(FUZZ_H2_CI, h2_scripts(), lambda script: _check_h2_script(h2_fuzzed, script))


@pytest.mark.slow
@pytest.mark.timeout(LONG_TIMEOUT_S)
def test_h2_frames_long(h2_fuzzed: H2Fuzzed) -> None:
    _fuzz(FUZZ_LONG, h2_scripts(), lambda script: _check_h2_script(h2_fuzzed, script))

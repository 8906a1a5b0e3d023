"""Malformed HTTP/1.1 requests every server must refuse, and survive (docs/contract.md,
"Hostile input"), and the servers' known deviations from those refusals."""

from __future__ import annotations

from harness.verify.endpoint import EndpointOrUrl
from harness.verify.failure import expect
from harness.verify.wire import exchange_until_close, expect_still_serving, responses, status_of
from servers import FRAMEWORKS

# A request hidden in the body of another: a server that frames the first one wrongly
# answers it too (a second response on the connection), which is request smuggling.
SMUGGLED = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
# Requests every server must refuse, and survive: name, raw bytes, the statuses accepted.
# Each gets exactly one response, and nothing after it (the smuggled request unanswered).
MALFORMED_REQUESTS: tuple[tuple[str, bytes, tuple[int, ...]], ...] = (
    ("garbage", b"GARBAGE\r\n\r\n", (400,)),
    ("extra-words", b"GET / HTTP/1.1 extra words\r\n\r\n", (400,)),
    # 505 Version Not Supported is nginx's answer, and the RFC's
    ("bad-version", b"GET / HTTP/9.9x\r\nHost: x\r\n\r\n", (400, 505)),
    ("bad-content-length", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n", (400,)),
    ("bad-header", b"GET / HTTP/1.1\r\nno colon header line\r\n\r\n", (400,)),
    ("above-the-root", b"GET /x/../../y HTTP/1.1\r\n\r\n", (400, 404)),
    (
        "oversized-headers",
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n",
        (400, 413, 431),
    ),
    # Ambiguous framing (RFC 9112 §6.3, docs/contract.md "Hostile input"): 400 and close.
    # 501 is the RFC's answer to a transfer coding the server does not know (nginx's).
    (
        "transfer-encoding-xchunked",
        b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n" + SMUGGLED,
        (400, 501),
    ),
    (
        "content-length-twice",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: %d\r\n\r\n"
        % len(SMUGGLED)
        + SMUGGLED,
        (400,),
    ),
    ("content-length-plus", b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc", (400,)),
    (
        "content-length-and-chunked",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n" + SMUGGLED,
        (400,),
    ),
    ("nul-in-header", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", (400,)),
)
# (server, case) -> why that server answers otherwise and why it is not ours to fix. The
# check reports these in its detail instead of failing; an entry that no longer deviates
# fails the check, so the list cannot go stale.
MALFORMED_DEVIATIONS: dict[tuple[str, str], str] = {}
# How long a connection may stay quiet after its one response before the check stops
# waiting for a second one: on loopback a smuggled request's answer follows within
# microseconds, and the servers close after most of these refusals at once.
MALFORMED_QUIET_S = 0.5


def check_malformed_requests(server: EndpointOrUrl, framework: str = "") -> str:
    """Every malformed request: one refusal (a status of its list) and nothing more on the
    connection, then the server still serves. `framework`'s known deviations are named."""
    deviated = []
    for name, request, accepted in MALFORMED_REQUESTS:
        reply = exchange_until_close(server, request, MALFORMED_QUIET_S)
        status = status_of(reply)
        count = responses(reply)
        ok = status in accepted and count <= 1
        reason = MALFORMED_DEVIATIONS.get((framework, name))
        if reason is None and framework in FRAMEWORKS:  # a plugin's or a command's own
            reason = FRAMEWORKS[framework].deviations.get(name)
        if reason is None:
            expect(status in accepted, f"{name} answered {reply[:60]!r}")
            expect(count <= 1, f"{name}: {count} responses on one connection")
        else:
            expect(not ok, f"{name} is refused now: drop its known deviation")
            deviated.append(f"{name} (known deviation: {reason})")
        expect_still_serving(server, name)
    refused = len(MALFORMED_REQUESTS) - len(deviated)
    return f"{refused} malformed requests refused, still serving" + "".join(
        f"; {d}" for d in deviated
    )

"""Malformed HTTP/1.1 requests every server must refuse, and survive (docs/contract.md,
"Hostile input"), and the servers' known deviations from those refusals."""

from __future__ import annotations

from harness.verify.endpoint import EndpointOrUrl
from harness.verify.severity import Outcome, judge_rule, with_deviations
from harness.verify.wire import (
    exchange_until_close,
    expect_still_serving,
    reply_text,
    responses,
    status_of,
)

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
# Each malformed request in words, for a finding's "sent".
MALFORMED_SENT: dict[str, str] = {
    "garbage": "GARBAGE and no request line",
    "extra-words": "a request line with extra words (GET / HTTP/1.1 extra words)",
    "bad-version": "GET / HTTP/9.9x",
    "bad-content-length": "GET / with Content-Length: nope",
    "bad-header": "GET / with a header line that has no colon",
    "above-the-root": "GET /x/../../y (a path above the root)",
    "oversized-headers": "GET / with a 200,000-byte X-Big header",
    "transfer-encoding-xchunked": "GET / with Transfer-Encoding: xchunked and a request after",
    "content-length-twice": "GET / with Content-Length twice (0, then the length of a "
    "request that follows)",
    "content-length-plus": "GET / with Content-Length: +3",
    "content-length-and-chunked": "GET / with both Content-Length: 5 and Transfer-Encoding: "
    "chunked, and a request after",
    "nul-in-header": "GET / with a NUL byte in a header value",
}
# (server, case) -> why that server answers otherwise and why it is not ours to fix. The
# check reports these in its detail instead of failing; an entry that no longer deviates
# fails the check, so the list cannot go stale.
MALFORMED_DEVIATIONS: dict[tuple[str, str], str] = {}
# How long a connection may stay quiet after its one response before the check stops
# waiting for a second one: on loopback a smuggled request's answer follows within
# microseconds, and the servers close after most of these refusals at once.
MALFORMED_QUIET_S = 0.5


def statuses_text(accepted: tuple[int, ...]) -> str:
    """`400, 413 or 431`."""
    words = [str(status) for status in accepted]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def check_malformed_requests(server: EndpointOrUrl, framework: str = "") -> str | Outcome:
    """Every malformed request: one refusal (a status of its list) and nothing more on the
    connection, then the server still serves. A request served otherwise is a deviation
    (harness.verify.severity), declared when the server's `deviations` name it; one
    declared but refused now fails the check, so a declaration cannot go stale."""
    deviations = []
    for name, request, accepted in MALFORMED_REQUESTS:
        reply = exchange_until_close(server, request, MALFORMED_QUIET_S)
        sent = MALFORMED_SENT.get(name, name)
        deviations.append(
            judge_rule(
                "malformed",
                name,
                status_of(reply) in accepted and responses(reply) <= 1,
                sent=sent,
                expected=f"{statuses_text(accepted)} and nothing more on the connection",
                came=reply_text(reply),
                framework=framework,
                declared=MALFORMED_DEVIATIONS.get((framework, name)),
            )
        )
        expect_still_serving(server, sent)
    refused = deviations.count(None)
    detail = f"{refused} of {len(MALFORMED_REQUESTS)} malformed requests refused, still serving"
    return with_deviations(detail, deviations)

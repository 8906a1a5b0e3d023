"""The boards' workloads' rules, once for every Python server (servers/contract.py holds
the values; each framework keeps only its routing, its timer and its body reading)."""

from __future__ import annotations

import gzip
import json

from servers import contract
from servers.core.body_limit import TOO_LARGE_STATUS, BodyCounter, declared_too_large
from servers.core.error_replies import error_body

# Serialized once: the document is fixed; what the route costs is its compression.
JSON_COMP_BODY = json.dumps(contract.JSON_COMP_DOCUMENT, separators=(",", ":")).encode()
VARY = ("Vary", "Accept-Encoding")
# The body of the 400 answering a `/delay/{ms}` segment that `delay_ms` refuses.
DELAY_REFUSAL_BODY = error_body(contract.BAD_REQUEST_STATUS)


def json_body() -> bytes:
    """TechEmpower's JSON test type: the message serialized anew for this request."""
    return json.dumps(contract.JSON_MESSAGE).encode()


def delay_ms(segment: str) -> int | None:
    """The milliseconds a `/delay/{ms}` segment asks for; None (answer 400) unless it is
    1 to 5 decimal digits naming at most contract.DELAY_MAX_MS."""
    if not (segment.isdigit() and segment.isascii() and len(segment) <= 5):
        return None
    value = int(segment)
    return value if value <= contract.DELAY_MAX_MS else None


def wants_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding value names gzip with a non-zero weight (RFC 9110 §12.5.3)."""
    for coding in (accept_encoding or "").lower().split(","):
        name, _, params = coding.partition(";")
        if name.strip() not in ("gzip", "x-gzip"):
            continue
        weight = params.replace(" ", "").removeprefix("q=")
        try:
            return not params or float(weight) > 0
        except ValueError:
            return False
    return False


def json_comp_body(gzipped: bool) -> bytes:
    """`/json-comp`'s body: the document, gzip-compressed for this request when asked."""
    if not gzipped:
        return JSON_COMP_BODY
    return gzip.compress(JSON_COMP_BODY, compresslevel=contract.GZIP_LEVEL, mtime=0)


def upload_refusal(declared_bytes: int | None) -> int | None:
    """413 when a declared Content-Length is over contract.UPLOAD_MAX_BODY_BYTES (before
    any of the body is read), else None. Answered with servers.core.body_limit's body, and
    the connection closed, as a `/log` body over its limit."""
    if declared_too_large(declared_bytes, contract.UPLOAD_MAX_BODY_BYTES):
        return TOO_LARGE_STATUS
    return None


def upload_counter() -> BodyCounter:
    """Counts an `/upload` body as it arrives (a chunked one has no declared length):
    `take` is False once it is over contract.UPLOAD_MAX_BODY_BYTES (then 413, as above)."""
    return BodyCounter(contract.UPLOAD_MAX_BODY_BYTES)


def upload_reply(body_bytes: int) -> bytes:
    """`/upload`'s reply: the body's byte count in decimal."""
    return b"%d" % body_bytes

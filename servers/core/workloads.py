"""The boards' workloads' rules, once for every Python server (servers/contract.py holds
the values; each framework keeps only its routing, its timer and its body reading)."""

from __future__ import annotations

import gzip
import json

from servers import contract

# Serialized once: the document is fixed; what the route costs is its compression.
JSON_COMP_BODY = json.dumps(contract.JSON_COMP_DOCUMENT, separators=(",", ":")).encode()
VARY = ("Vary", "Accept-Encoding")


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
    any of the body is read), else None."""
    if declared_bytes is not None and declared_bytes > contract.UPLOAD_MAX_BODY_BYTES:
        return 413
    return None


def upload_reply(body_bytes: int) -> bytes:
    """`/upload`'s reply: the body's byte count in decimal."""
    return b"%d" % body_bytes

"""The words of an error answer, the same on every Python server whatever Python's own
phrase table says: the status line's reason (`413 Request Entity Too Large`) and the body
in aiohttp's shape (`413: Request Entity Too Large`).

`http.HTTPStatus` renamed some phrases (Python 3.13: 413 "Content Too Large", 422
"Unprocessable Content"); a server building its text from it would answer differently on
each Python. The reasons here are fixed: the RFC 7231 names aiohttp and the other
frameworks send.
"""

from __future__ import annotations

from http import HTTPStatus

# The codes our servers answer with themselves; any other falls back to Python's phrase.
REASONS: dict[int, str] = {
    101: "Switching Protocols",
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Request Entity Too Large",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def reason(code: int) -> str:
    """The reason phrase of `code`: `Not Found`."""
    return REASONS.get(code) or HTTPStatus(code).phrase


def status_line(code: int) -> str:
    """The WSGI status of `code`: `404 Not Found`."""
    return f"{code} {reason(code)}"


def error_body(code: int) -> bytes:
    """An error answer's text/plain body in aiohttp's shape: `404: Not Found`."""
    return f"{code}: {reason(code)}".encode()

"""Request framing rules (RFC 9112 §6.3): whether a header section frames its body safely.

A request whose body length two parsers could read differently is how requests are
smuggled: a proxy and a server (or a server and itself, on a kept-alive connection) then
disagree where the next request starts. The contract answers every such request 400 and
closes the connection (docs/contract.md, "Hostile input"). Most frameworks' parsers
refuse them already; the green servers' (gevent's pywsgi, eventlet.wsgi) do not, so their
runtime calls `framing_error` on every request before it reads a body. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# RFC 9110 §5.1: a field name is a token; "Content-Length :" (a space before the colon)
# must be refused, not read as another header (RFC 9112 §5.1).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# RFC 9110 §5.5: CR, LF and NUL are never allowed in a value; the other controls but
# HTAB are not field-vchars either.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# RFC 9110 §8.6: Content-Length = 1*DIGIT ("+3", "-1", "0x10", " 3 3" are not lengths).
_DIGITS = re.compile(r"[0-9]{1,18}")


def framing_error(headers: Iterable[tuple[str, str]]) -> str | None:
    """Why this header section (names and values as received, repeats included) cannot
    frame a request safely, or None when it can. Any reason is answered 400 and close.

    One pass over the headers, as cheap as a few string comparisons per header on the
    hot path (a GET with three headers: about a microsecond).
    """
    content_length: str | None = None
    chunked = False
    for name, value in headers:
        if _CONTROL.search(value) is not None:
            return f"a control character in the value of {name!r}"
        lower = name.lower()
        if lower == "content-length":
            for length in value.split(","):
                length = length.strip(" \t")
                if _DIGITS.fullmatch(length) is None:
                    return f"Content-Length {value!r} is not a length"
                if content_length is not None and int(length) != int(content_length):
                    return "two different Content-Lengths"
                content_length = length
        elif lower == "transfer-encoding":
            # The only coding the servers decode; a second TE header, a list, or a
            # lookalike ("xchunked", "chunked, gzip") is refused rather than guessed at.
            if chunked or value.strip(" \t").lower() != "chunked":
                return f"Transfer-Encoding {value!r} is not 'chunked'"
            chunked = True
        elif _TOKEN.fullmatch(name) is None:
            return f"{name!r} is not a header name"
    if chunked and content_length is not None:
        return "both Content-Length and Transfer-Encoding"
    return None

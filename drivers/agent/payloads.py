"""The WebSocket study's two messages: short `{"a": "b"}` and ~7,000 characters of
key/value pairs."""

from __future__ import annotations

import json

LONG_MESSAGE_CHARS = 7000


def long_message(chars: int = LONG_MESSAGE_CHARS) -> bytes:
    """`{"testKeyValue0": "veryVeryLongDataValue", ...}` grown to about `chars` characters."""
    pairs: dict[str, str] = {}
    while len(json.dumps(pairs)) < chars:
        pairs[f"testKeyValue{len(pairs)}"] = "veryVeryLongDataValue"
    return json.dumps(pairs).encode()


PAYLOADS: dict[str, bytes] = {"short": json.dumps({"a": "b"}).encode(), "long": long_message()}

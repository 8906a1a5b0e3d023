"""The contract's limit on a request body (`contract.LOG_MAX_BODY_BYTES`), judged alike
everywhere.

A declared Content-Length over the limit is refused 413 before any of the body is read
(a declared 2 GiB that never comes is refused at once); a body without a declared length
(chunked) is counted as it arrives and refused once it grows past the limit. After a 413
the connection closes: the rest of the body is not read. Each runtime answers in its own
idiom with `TOO_LARGE_STATUS` and `TOO_LARGE_BODY`.
"""

from __future__ import annotations

from servers import contract

TOO_LARGE_STATUS = 413
TOO_LARGE_BODY = b"413: Request Entity Too Large"


def declared_too_large(content_length: int | None) -> bool:
    """Whether a declared Content-Length (None: none declared) is over the limit."""
    return content_length is not None and content_length > contract.LOG_MAX_BODY_BYTES


class BodyCounter:
    """Counts a body's bytes as they arrive, to refuse it once past the limit."""

    __slots__ = ("received_bytes",)

    def __init__(self) -> None:
        self.received_bytes = 0

    def take(self, chunk_bytes: int) -> bool:
        """Count `chunk_bytes` more; False once the body is over the limit."""
        self.received_bytes += chunk_bytes
        return self.received_bytes <= contract.LOG_MAX_BODY_BYTES

"""The contract's limit on a request body (`contract.LOG_MAX_BODY_BYTES`), judged alike
everywhere.

A declared Content-Length over the limit is refused 413 before any of the body is read
(a declared 2 GiB that never comes is refused at once); a body without a declared length
(chunked) is counted as it arrives and refused once it grows past the limit. After a 413
the connection closes: the rest of the body is not read. Each runtime answers in its own
idiom with `TOO_LARGE_STATUS` and `TOO_LARGE_BODY`. The boards' `/upload` is judged by the
same rule against its own limit (`limit_bytes`: contract.UPLOAD_MAX_BODY_BYTES, through
servers.core.workloads).
"""

from __future__ import annotations

from servers import contract
from servers.core.error_replies import error_body

TOO_LARGE_STATUS = 413
TOO_LARGE_BODY = error_body(TOO_LARGE_STATUS)  # b"413: Request Entity Too Large"


def declared_too_large(
    content_length: int | None, limit_bytes: int = contract.LOG_MAX_BODY_BYTES
) -> bool:
    """Whether a declared Content-Length (None: none declared) is over `limit_bytes`."""
    return content_length is not None and content_length > limit_bytes


class BodyCounter:
    """Counts a body's bytes as they arrive, to refuse it once past `limit_bytes`."""

    __slots__ = ("limit_bytes", "received_bytes")

    def __init__(self, limit_bytes: int = contract.LOG_MAX_BODY_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self.received_bytes = 0

    def take(self, chunk_bytes: int) -> bool:
        """Count `chunk_bytes` more; False once the body is over the limit."""
        self.received_bytes += chunk_bytes
        return self.received_bytes <= self.limit_bytes

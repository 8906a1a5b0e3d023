"""What every runtime's backends share: the failure that answers 503, and a file read back.

A backend (memcached, the GridFS database) that fails, refuses or times out raises
`BackendUnavailable` where the runtime notices it, after counting it once in
`state.backend_errors`; the route answers `contract.UNAVAILABLE_STATUS` with
`contract.BACKEND_UNAVAILABLE_BODY`, the socket service `memcache.REPLY_UNAVAILABLE`.
"""

from __future__ import annotations

from dataclasses import dataclass


class BackendUnavailable(Exception):
    """memcached or the database failed or timed out: the request is answered 503."""


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file read from GridFS: its bytes and Content-Type."""

    data: bytes
    content_type: str

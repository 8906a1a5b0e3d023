"""What one HTTP/2 connection may send that costs the server work without progress.

A client can make a server work with frames that cost it nothing and serve nobody:
streams opened and reset at once (rapid reset, CVE-2023-44487), PINGs and SETTINGS whose
acknowledgements it never reads, empty or tiny DATA frames that never end a body,
WINDOW_UPDATE and PRIORITY frames, and a header block that never ends (CONTINUATION
frames). `FrameBudget` reads the frame headers a connection receives (the bytes as they
come, before the HTTP/2 library sees them) and counts each kind; each kind may exceed its
allowance, `base + per_progress × progress`, never (docs/contract.md, "HTTP/2 limits"),
where progress is what the connection got done: responses completed, and every 16 KiB of
body received or sent. A well-behaved client (h2load's 100 streams × many requests, a
browser) stays far inside; an attacker passes a limit within a few thousand frames, and
the server answers GOAWAY ENHANCE_YOUR_CALM and closes (as nginx and Node do).

Framework-neutral and pure: the server feeds it the bytes it reads (`received`) and tells
it the progress it made (`served`, `sent`); `received` names the limit passed, if any.
"""

from __future__ import annotations

from servers import contract
from servers.contract import H2Limit

PREFACE_BYTES = 24  # "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", before the first frame
FRAME_HEADER_BYTES = 9
# RFC 9113 §6: the frame types counted, and the flags that matter
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x2,
    0x3,
    0x4,
    0x6,
    0x8,
    0x9,
)
FLAG_END_STREAM = 0x1
FLAG_ACK = 0x1
FLAG_END_HEADERS = 0x4
PROGRESS_BYTES = 16 * 1024  # body bytes (either way) that count as one unit of progress


class FrameBudget:
    """One connection's counts of frames that cost work without progress, against its
    allowances (`limits`: contract.H2_LIMITS by default)."""

    def __init__(
        self,
        limits: dict[str, H2Limit] | None = None,
        max_header_block_bytes: int = contract.H2_MAX_HEADER_BLOCK_BYTES,
        max_continuation_frames: int = contract.H2_MAX_CONTINUATION_FRAMES,
        preface: bool = True,
    ) -> None:
        self.limits = contract.H2_LIMITS if limits is None else limits
        self.max_header_block_bytes = max_header_block_bytes
        self.max_continuation_frames = max_continuation_frames
        self.counts = dict.fromkeys(self.limits, 0)
        self.responses = 0
        self.body_bytes = 0  # DATA payload received, and response body sent
        self._skip = PREFACE_BYTES if preface else 0  # bytes still to pass over
        self._header = b""  # a frame header begun in one read, ended in the next
        self._block_bytes = 0  # of the header block under way (HEADERS + CONTINUATION)
        self._block_frames = 0  # CONTINUATION frames of that block
        self.passed: str | None = None  # the limit passed, once one is

    @property
    def progress(self) -> int:
        """Responses completed, and every PROGRESS_BYTES of body either way."""
        return self.responses + self.body_bytes // PROGRESS_BYTES

    def allowance(self, kind: str) -> int:
        """How many frames of `kind` the connection may send, given its progress so far."""
        limit = self.limits[kind]
        return limit.base + int(limit.per_progress * self.progress)

    def served(self, responses: int = 1) -> None:
        """`responses` responses were completed on the connection."""
        self.responses += responses

    def sent(self, body_bytes: int) -> None:
        """`body_bytes` of response body were written on the connection."""
        self.body_bytes += body_bytes

    def received(self, data: bytes) -> str | None:
        """Count the frames in `data` (the next bytes read); the limit passed, once one is
        (then and every time after): a kind of contract.H2_LIMITS, or `header-block`."""
        at = 0
        while self.passed is None and at < len(data):
            if self._skip:  # inside a frame's payload
                step = min(self._skip, len(data) - at)
                self._skip -= step
                at += step
                continue
            wanted = FRAME_HEADER_BYTES - len(self._header)
            self._header += data[at : at + wanted]
            at += wanted
            if len(self._header) == FRAME_HEADER_BYTES:
                header, self._header = self._header, b""
                self._skip = int.from_bytes(header[:3])
                self.passed = self._frame(header[3], header[4], self._skip)
        return self.passed

    def _frame(self, frame_type: int, flags: int, length: int) -> str | None:
        if frame_type in (HEADERS, CONTINUATION):
            return self._header_block(frame_type, flags, length)
        kind = None
        if frame_type == DATA:
            self.body_bytes += length
            if not flags & FLAG_END_STREAM and length < contract.H2_SMALL_DATA_BYTES:
                kind = "small-data"
        elif frame_type == RST_STREAM:
            kind = "reset"
        elif frame_type == PING and not flags & FLAG_ACK:
            kind = "ping"
        elif frame_type == SETTINGS and not flags & FLAG_ACK:
            kind = "settings"
        elif frame_type == WINDOW_UPDATE:
            kind = "window-update"
        elif frame_type == PRIORITY:
            kind = "priority"
        if kind is None or kind not in self.counts:
            return None
        self.counts[kind] += 1
        return kind if self.counts[kind] > self.allowance(kind) else None

    def _header_block(self, frame_type: int, flags: int, length: int) -> str | None:
        if frame_type == HEADERS:
            self._block_bytes, self._block_frames = 0, 0
        else:
            self._block_frames += 1
        self._block_bytes += length
        if (
            self._block_bytes > self.max_header_block_bytes
            or self._block_frames > self.max_continuation_frames
        ):
            return "header-block"
        if flags & FLAG_END_HEADERS:
            self._block_bytes, self._block_frames = 0, 0
        return None

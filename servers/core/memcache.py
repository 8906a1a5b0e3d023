"""The memcached text protocol and the memcached socket service's session: no I/O.

Each runtime keeps its own pool of `contract.MC_POOL_SIZE` persistent connections to
memcached (in its own idiom) and uses these to speak to it:

    send `get_request(key)`, feed what comes back to `parse_get_reply` until it returns.

The memcached socket service on `--mc-socket-port` (the memcached-proxy study) runs one
`SocketServiceSession` per client connection: the runtime feeds it the bytes it reads,
fetches the keys it hands out through the same pool, and writes what it says to write.
Only `get <key>` (one key) and `quit` are served; anything else gets `ERROR`.
"""

from __future__ import annotations

from dataclasses import dataclass

from servers import contract
from servers.core.state import ServerState

MAX_LINE_BYTES = 2048  # a longer request line is refused and the connection closed
REPLY_END = b"END\r\n"
REPLY_ERROR = b"ERROR\r\n"
REPLY_LINE_TOO_LONG = b"CLIENT_ERROR line too long\r\n"
REPLY_BAD_KEY = b"CLIENT_ERROR bad key\r\n"
REPLY_UNAVAILABLE = b"SERVER_ERROR memcached unavailable\r\n"


class MemcacheError(Exception):
    """memcached answered with an error line, or with bytes that are not a reply."""


def valid_key(key: bytes) -> bool:
    """memcached's key rule: 1..250 bytes, no spaces or control characters."""
    return 0 < len(key) <= contract.MC_MAX_KEY_BYTES and all(32 < b < 127 for b in key)


def get_request(key: bytes) -> bytes:
    return b"get " + key + b"\r\n"


def parse_get_reply(buffer: bytes | bytearray) -> tuple[bytes | None, int] | None:
    """One complete `get` reply from the start of `buffer`: (value or None on a miss, bytes
    consumed), or None when more bytes are needed. Raises MemcacheError on an error reply."""
    line_end = buffer.find(b"\r\n")
    if line_end < 0:
        if len(buffer) > MAX_LINE_BYTES:
            raise MemcacheError(f"no line end in {len(buffer)} bytes")
        return None
    line = bytes(buffer[:line_end])
    if line == b"END":
        return None, line_end + 2
    parts = line.split()
    if len(parts) < 4 or parts[0] != b"VALUE":
        raise MemcacheError(line.decode("latin-1")[:200])
    try:
        length = int(parts[3])
    except ValueError:
        raise MemcacheError(f"bad length in {line!r}") from None
    data_start = line_end + 2
    data_end = data_start + length
    total = data_end + 2 + len(REPLY_END)
    if len(buffer) < total:
        return None
    if bytes(buffer[data_end:total]) != b"\r\n" + REPLY_END:
        raise MemcacheError("value not followed by END")
    return bytes(buffer[data_start:data_end]), total


def encode_get_reply(key: bytes, value: bytes | None) -> bytes:
    """The socket service's answer to `get key`: the value block and END, or END alone on a miss."""
    if value is None:
        return REPLY_END
    header = b"VALUE %s 0 %d\r\n" % (key, len(value))
    return header + value + b"\r\n" + REPLY_END


@dataclass(frozen=True)
class Command:
    """One request line to the socket service: `get` with its key, `quit`, or an error."""

    verb: str  # "get" | "quit" | "error"
    key: bytes = b""
    reply: bytes = b""  # for "error": what to send back


def split_line(buffer: bytes | bytearray) -> tuple[bytes, int] | None:
    """The first request line (without CRLF or LF) and the bytes it took, or None."""
    line_end = buffer.find(b"\n")
    if line_end < 0:
        return None
    line = bytes(buffer[:line_end])
    return line.removesuffix(b"\r"), line_end + 1


def parse_command(line: bytes) -> Command:
    """What a socket-service client asked for in one line (`get <key>` or `quit`)."""
    parts = line.split()
    if parts == [b"quit"]:
        return Command("quit")
    if len(parts) == 2 and parts[0] in (b"get", b"gets"):
        if not valid_key(parts[1]):
            return Command("error", reply=REPLY_BAD_KEY)
        return Command("get", parts[1])
    return Command("error", reply=REPLY_ERROR)


def memcached_address(spec: str | None) -> tuple[str, int]:
    """`--memcached HOST:PORT` as (host, port); memcached's default when not given."""
    host, _, port = (spec or "127.0.0.1:11211").rpartition(":")
    return host or "127.0.0.1", int(port)


# The session below keeps one get in flight: the contract's rule. Changing the rule means
# changing the session (and Node's copy of it), not just the number.
assert contract.MC_SOCKET_MAX_IN_FLIGHT == 1, "SocketServiceSession serves one get at a time"


class SocketServiceSession:
    """One client of the memcached socket service, sans I/O.

    The contract's rule (`contract.MC_SOCKET_MAX_IN_FLIGHT`): request lines are answered
    in order, one get in flight at a time; later lines wait in the buffer. A runtime

    - feeds what it reads to `receive`, which returns a key to fetch or None;
    - fetches that key through its pool and reports `answered(value)` (None: a miss) or
      `failed()`, each of which may return the next key to fetch;
    - writes `output()` whenever it likes (at least before reading again), and closes
      the connection once `closing` is true and the output is written.

    Each get counts in `state.requests`, as an HTTP request does.
    """

    __slots__ = ("_answers", "_buffer", "_state", "closing", "key")

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._buffer = bytearray()
        self._answers: list[bytes] = []  # ready to write, in request order
        self.key: bytes | None = None  # the get in flight
        self.closing = False  # quit, or a line too long: close once the output is written

    @property
    def buffered_bytes(self) -> int:
        """Bytes read but not yet acted on (a runtime pauses reading when they pile up)."""
        return len(self._buffer)

    def receive(self, data: bytes) -> bytes | None:
        """Take bytes the client sent; the key to fetch now, if any."""
        if self.closing:
            return None
        buffer = self._buffer
        if not buffer and self.key is None:  # the usual read: one whole line, nothing waiting
            taken = split_line(data)
            if taken is not None and taken[1] == len(data):
                return self._command(taken[0])
        buffer += data
        if self.key is not None:
            return None  # the lines wait for the get in flight
        return self._next()

    def answered(self, value: bytes | None) -> bytes | None:
        """memcached answered the get in flight (`value` None: a miss); the next key, if any."""
        key = self.key
        self.key = None
        assert key is not None
        self._answers.append(encode_get_reply(key, value))
        return self._next()

    def failed(self) -> bytes | None:
        """The get in flight failed (memcached down, a timeout); the next key, if any."""
        self.key = None
        self._answers.append(REPLY_UNAVAILABLE)
        return self._next()

    def output(self) -> bytes:
        """The answers ready to write, in request order (b"" when none)."""
        answers = self._answers
        if not answers:
            return b""
        self._answers = []
        return answers[0] if len(answers) == 1 else b"".join(answers)

    def _next(self) -> bytes | None:
        """Act on buffered lines up to the next get; its key, or None when none is ready."""
        buffer = self._buffer
        while not self.closing:
            taken = split_line(buffer)
            if taken is None:
                if len(buffer) > MAX_LINE_BYTES:
                    buffer.clear()
                    self._answers.append(REPLY_LINE_TOO_LONG)
                    self.closing = True
                return None
            line, used = taken
            del buffer[:used]  # O(1): bytearray drops a prefix in place
            key = self._command(line)
            if key is not None:
                return key
        return None

    def _command(self, line: bytes) -> bytes | None:
        """Act on one request line; the key when it is a get."""
        command = parse_command(line)
        if command.verb == "get":
            self._state.requests += 1
            self.key = command.key
            return command.key
        if command.verb == "quit":
            self.closing = True
        else:
            self._answers.append(command.reply)
        return None

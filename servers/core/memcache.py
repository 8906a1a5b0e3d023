"""The memcached text protocol, as far as the proxy needs it: pure functions, no I/O.

Each framework keeps its own pool of `contract.MC_POOL_SIZE` persistent connections to
memcached (in its own idiom) and uses these to speak to it:

    send `get_request(key)`, feed what comes back to `parse_get_reply` until it returns.

The socket service on `--mc-proxy-port` (seed 001) reads request lines with
`parse_proxy_line` and answers with `encode_get_reply`, fetching through the same pool.
Only `get <key>` (one key) and `quit` are served; anything else gets `ERROR`.
"""

from __future__ import annotations

from dataclasses import dataclass

from servers import contract

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
    """The proxy's answer to `get key`: the value block and END, or END alone on a miss."""
    if value is None:
        return REPLY_END
    header = b"VALUE %s 0 %d\r\n" % (key, len(value))
    return header + value + b"\r\n" + REPLY_END


@dataclass(frozen=True)
class ProxyCommand:
    """One request line to the proxy: `get` with its key, `quit`, or an error to answer."""

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


def parse_proxy_line(line: bytes) -> ProxyCommand:
    """What a proxy client asked for in one line (`get <key>` or `quit`)."""
    parts = line.split()
    if parts == [b"quit"]:
        return ProxyCommand("quit")
    if len(parts) == 2 and parts[0] in (b"get", b"gets"):
        if not valid_key(parts[1]):
            return ProxyCommand("error", reply=REPLY_BAD_KEY)
        return ProxyCommand("get", parts[1])
    return ProxyCommand("error", reply=REPLY_ERROR)


def memcached_address(spec: str | None) -> tuple[str, int]:
    """`--memcached HOST:PORT` as (host, port); memcached's default when not given."""
    host, _, port = (spec or "127.0.0.1:11211").rpartition(":")
    return host or "127.0.0.1", int(port)

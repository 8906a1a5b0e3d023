"""Hypothesis strategies for the fuzz suite (tests/e2e/test_fuzz.py), in one place.

Each strategy draws the bytes a client sends *and* what a server may be held to for them:

- `http_inputs`: raw HTTP/1.x requests (request lines, header fields, bodies and their
  framing, well formed or not) to every route but `/log`, whose records `log_requests`
  judges, and the backend routes (`/gridfs`, `/mc`: no backend runs under the fuzzer, and
  a missing backend's 503 says nothing about a parser). `complete` says whether a server
  has all it needs to answer.
- `log_requests`: `/log` requests, each well formed (answered 200 and stored once) or
  broken in one way the contract refuses (docs/contract.md, "Hostile input": never a
  record).
- `ws_scripts`: what a client sends after a valid `/ws` handshake (text messages cut
  into fragments anywhere, UTF-8 characters included, control frames between fragments,
  mask keys, every length form, then at most one frame or message the contract refuses)
  and the close codes the server may answer with.
- `h2_scripts`: HTTP/2 frames sent after a valid preface and SETTINGS (any type, flags,
  stream and payload, a valid request among them at times), then a PING; `complete`
  unless a frame declares another length than its payload's (then the server may wait).

"Complete" is judged conservatively: a head ends with an empty line (CRLF line endings
only, since RFC 9112 §2.2 lets a server wait for a CR), its request line is not blank
(§2.2: empty lines before a request are skipped), and the body is all there under every
reading of its framing a lenient parser might take. Anything else is incomplete: a
server may wait for more, until the slow-client deadline (`--client-timeout-s`).
"""

from __future__ import annotations

import itertools
import json
import string
from dataclasses import dataclass, replace
from urllib.parse import unquote_to_bytes

from hpack import Encoder
from hypothesis import strategies as st

from harness.verify.h2wire import FRAME_CONTINUATION, FRAME_HEADERS, h2_frame
from servers import contract
from tests.helpers import ws_frame

CRLF = b"\r\n"
# RFC 9110 §5.6.2: the characters of a token (a method, a header name)
TOKEN_CHARS = "!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits
# Bytes for a request line or a header, any but the ones that end a line: a CR or LF
# inside would move where the head ends, which `complete` must know.
LINE_BYTES = st.binary(max_size=16).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
# Headers that decide framing or the connection's fate: drawn on purpose, never at random.
FRAMING_NAMES = frozenset(
    {"content-length", "transfer-encoding", "connection", "upgrade", "expect", "host", "te"}
)
# Content-Length values that are not 1*DIGIT, each with the longest body any lenient
# reading of it could ask for ("3 3" as 33, "0x10" as 16): sent in full, so a server that
# reads it either way has the whole request and must answer.
BAD_CONTENT_LENGTHS: dict[bytes, int | None] = {
    b"+3": 3,
    b"-1": 1,
    b"0x10": 16,
    b"3 3": 33,
    b"1e2": 100,
    b"": 0,
    b"3,4": 4,
    b"abc": 0,
    # digits, but past any integer a server keeps: refused (400, 413) or, read as a
    # length, waited for (None: no body could complete it)
    b"99999999999999999999999": None,
}
# Transfer-Encodings other than exactly "chunked" (RFC 9112 §6.3: 400, or 501 for a
# coding the server does not know); the body sent is a whole chunked one.
BAD_TRANSFER_ENCODINGS = (b"xchunked", b"chunked, gzip", b"gzip", b"identity", b"chunked\x0b")
LAST_CHUNK = b"0\r\n\r\n"


def _one_in(draw: st.DrawFn, n: int) -> bool:
    """True about once in `n` draws. The rare branch is the largest value, not 0:
    Hypothesis leans to the smallest values, which would make it common."""
    return draw(st.integers(1, n)) == n


def _token(max_size: int = 12) -> st.SearchStrategy[str]:
    return st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=max_size)


def _field_value_text(max_size: int = 24) -> st.SearchStrategy[bytes]:
    """A header value as RFC 9110 §5.5 allows it: visible ASCII, spaces and tabs inside,
    and obs-text (bytes 0x80-0xFF), which a server must accept as opaque."""
    visible = st.text(alphabet=string.printable[:94] + " \t", max_size=max_size).map(
        lambda s: s.strip(" \t").encode()
    )
    obs_text = st.binary(max_size=6).map(lambda b: bytes(x | 0x80 for x in b))
    return st.one_of(visible, st.tuples(visible, obs_text, visible).map(b"".join))


def chunked_body(body: bytes, cuts: list[int], extension: bool, trailer: bool) -> bytes:
    """`body` in the chunked coding (RFC 9112 §7.1), cut at `cuts`, with a chunk extension
    on every chunk and a trailer field when asked."""
    bounds = sorted({c for c in cuts if 0 < c < len(body)} | {0, len(body)})
    ext = b";ext=1" if extension else b""
    pieces = [
        b"%x%s\r\n%s\r\n" % (end - start, ext, body[start:end])
        for start, end in itertools.pairwise(bounds)
        if end > start
    ]
    return b"".join(pieces) + b"0\r\n" + (b"X-Trailer: t\r\n" if trailer else b"") + CRLF


# -- HTTP requests to any route but /log -------------------------------------------------
@dataclass(frozen=True)
class HttpInput:
    """Bytes sent on one connection, and whether they hold a whole request."""

    data: bytes
    complete: bool


def _targets() -> st.SearchStrategy[bytes]:
    """Request targets: the routes, escapes, absolute and asterisk forms, and junk."""
    known = st.sampled_from(
        [
            b"/",
            b"/counter",
            b"/ws",
            b"/files/",
            b"/files/a.txt",
            b"/files/../../etc/passwd",
            b"/files/%2e%2e%2fx",
            b"/nope",
            b"*",
            b"http://x/",
            b"http://x:99999/counter",
            b"/?a=b&c",
            b"//",
            b"/./counter",
            b"/%00",
            b"/%zz",
            b"/%",
            b"/\xff\xfe",
            b"/#frag",
            b"",
        ]
    )
    path_chars = string.ascii_letters + string.digits + "/.%?#&=;:@!$'()*+,-_~[]"
    paths = st.text(alphabet=path_chars, max_size=40).map(lambda s: b"/" + s.encode())
    raw = LINE_BYTES
    long_path = st.integers(1000, 20_000).map(lambda n: b"/" + b"a" * n)
    return st.one_of(known, paths, raw, long_path).filter(_not_log_nor_backend)


def _not_log_nor_backend(target: bytes) -> bool:
    decoded = unquote_to_bytes(target).lower()
    return b"log" not in decoded and b"gridfs" not in decoded and b"/mc" not in decoded


METHODS = (
    *(b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"TRACE"),
    *(b"CONNECT", b"PRI", b"get", b"G ET"),
)
VERSIONS = (
    *(b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/0.9", b"HTTP/1.2", b"HTTP/1"),
    *(b"HTTP/11", b"http/1.1", b"HTTP/1.1 x", b"HTTP/9.9x", b"", b"HTTP/1.1\x00"),
)
HEADER_NAMES = (
    *(b"Accept", b"Cookie", b"User-Agent", b"Origin", b"Sec-WebSocket-Key"),
    *(b"Sec-WebSocket-Version", b"Sec-WebSocket-Protocol", b"X-Forwarded-For"),
)


def _request_lines() -> st.SearchStrategy[bytes]:
    methods = st.one_of(
        st.sampled_from(METHODS),
        _token().map(str.encode),
        LINE_BYTES,
    )
    versions = st.one_of(
        st.sampled_from(VERSIONS),
        LINE_BYTES,
    )
    separators = st.sampled_from([b" ", b" ", b" ", b"  ", b"\t", b""])
    return st.tuples(methods, separators, _targets(), separators, versions).map(b"".join)


def _header_fields() -> st.SearchStrategy[bytes]:
    """One header line (no line ending): well formed, or broken in a way that does not
    touch framing (a framing header is drawn by `_framing`, never here)."""
    names = st.one_of(
        st.sampled_from(HEADER_NAMES),
        _token().map(str.encode),
    ).filter(lambda n: n.lower() not in {f.encode() for f in FRAMING_NAMES})
    values = st.one_of(
        _field_value_text(),
        st.sampled_from([b"agent", b"myprotocol", b"13", b"dGhlIHNhbXBsZSBub25jZQ=="]),
        LINE_BYTES,  # control bytes included: refused by the contract
        st.integers(1000, 100_000).map(lambda n: b"a" * n),  # up to oversized headers
    )
    well_formed = st.tuples(names, values).map(lambda nv: nv[0] + b": " + nv[1])
    broken = st.one_of(
        LINE_BYTES,  # a line without a colon, mostly
        st.tuples(names, values).map(lambda nv: nv[0] + b" : " + nv[1]),  # space before colon
        st.tuples(names, values).map(lambda nv: b" " + nv[0] + b": " + nv[1]),  # obs-fold
        st.tuples(LINE_BYTES, values).map(lambda nv: nv[0] + b":" + nv[1]),  # any name
    ).filter(_not_a_framing_line)
    return st.one_of(well_formed, well_formed, broken)


def _not_a_framing_line(line: bytes) -> bool:
    """A broken line a lenient parser could still read as a framing header is drawn by
    `_framing` instead, which knows what body such a line asks for."""
    name = line.split(b":", 1)[0].strip(b" \t").lower()
    return name.decode("latin-1") not in FRAMING_NAMES


@st.composite
def _framing(draw: st.DrawFn) -> tuple[list[bytes], bytes, bool]:
    """Framing header lines, the body, and whether the body is all there (under every
    reading a lenient parser might give the framing)."""
    body = draw(st.binary(max_size=64))
    kind = draw(st.sampled_from(["none", "length", "length", "chunked", "hostile", "expect"]))
    if kind == "none":
        return [], b"", True
    if kind in ("length", "expect"):
        declared = len(body) + draw(st.sampled_from([0, 0, 0, 1, 100]))  # short: incomplete
        lines = [b"Content-Length: %d" % declared]
        if kind == "expect":
            lines.append(b"Expect: 100-continue")
        return lines, body, declared == len(body)
    if kind == "chunked":
        cuts = draw(st.lists(st.integers(0, 64), max_size=4))
        encoded = chunked_body(body, cuts, draw(st.booleans()), draw(st.booleans()))
        cut = draw(st.sampled_from([len(encoded), len(encoded), len(encoded) - 2, 3]))
        return [b"Transfer-Encoding: chunked"], encoded[:cut], cut >= len(encoded)
    # hostile framing (docs/contract.md, "Hostile input"): refused with 400 (or 501), and
    # sent with a body long enough for any reading of it
    shape = draw(st.sampled_from(["two-lengths", "length-and-chunked", "bad-length", "bad-te"]))
    if shape == "two-lengths":
        first, second = draw(st.tuples(st.integers(0, 30), st.integers(31, 64)))
        lines = [b"Content-Length: %d" % first, b"Content-Length: %d" % second]
        return lines, b"x" * second, True
    if shape == "length-and-chunked":
        lines = [b"Content-Length: %d" % len(LAST_CHUNK), b"Transfer-Encoding: chunked"]
        return lines, LAST_CHUNK, True
    if shape == "bad-length":
        value = draw(st.sampled_from(sorted(BAD_CONTENT_LENGTHS)))
        space = draw(st.sampled_from([b"Content-Length: ", b"Content-Length : "]))
        longest = BAD_CONTENT_LENGTHS[value]
        return [space + value], b"x" * (longest or 0), longest is not None
    codings = draw(st.sampled_from([*BAD_TRANSFER_ENCODINGS, b"chunked\r\nTransfer-Encoding: x"]))
    return [b"Transfer-Encoding: " + codings], LAST_CHUNK, True


@st.composite
def http_inputs(draw: st.DrawFn) -> HttpInput:
    """A raw HTTP/1.x request to any route but `/log`, or what a broken client sends."""
    request_line = draw(_request_lines())
    fields = draw(st.lists(_header_fields(), max_size=6))
    if not _one_in(draw, 5):  # mostly with a Host, as HTTP/1.1 requires
        fields.insert(0, b"Host: " + draw(st.sampled_from([b"x", b"127.0.0.1:1", b""])))
    if _one_in(draw, 6):  # sometimes an upgrade, to /ws or elsewhere
        fields += [
            b"Connection: Upgrade",
            b"Upgrade: " + draw(st.sampled_from([b"websocket", b"h2c", b"x"])),
        ]
    if _one_in(draw, 6):
        fields.append(b"Connection: " + draw(st.sampled_from([b"close", b"keep-alive", b"x"])))
    framing_lines, body, body_complete = draw(_framing())
    position = draw(st.integers(0, len(fields)))
    fields[position:position] = framing_lines
    line_end = draw(st.sampled_from([CRLF, CRLF, CRLF, b"\n"]))
    head = request_line + line_end + b"".join(f + line_end for f in fields) + line_end
    data = head + body
    complete = line_end == CRLF and request_line.strip(b" \t") != b"" and body_complete
    if _one_in(draw, 6):  # cut anywhere: a client that stops mid-request
        cut = draw(st.integers(0, len(data) - 1))
        return HttpInput(data[:cut], complete=False)
    return HttpInput(data, complete)


# -- /log requests: well formed, or refused by the contract -----------------------------
@dataclass(frozen=True)
class LogRequest:
    """One `/log` request on its own connection.

    `well_formed`: the contract answers it 200 `success`, with one record. Otherwise it is
    broken in the way `flaw` names and must never become a record; `complete` False means
    the client sends part of it and half-closes (a truncated body). `refusable`: well
    formed, but a framework's parser refuses it with 400 (a chunked body with chunk
    extensions or trailer fields, RFC 9112 §7.1: tornado's parser reads neither;
    docs/contract.md), which is then no record either.
    """

    data: bytes
    well_formed: bool
    flaw: str = ""
    complete: bool = True
    refusable: bool = False


LOG_METHODS = [b"POST", b"PUT", b"PATCH", b"DELETE", b"GET", b"OPTIONS"]
# What breaks a well-formed /log request; each is refused (400, 413, 501 or 505) or, for
# the truncated body, closed, and none is ever a record (docs/contract.md, "Hostile input",
# and "Headers, methods and errors").
LOG_FLAWS = (
    "te-not-chunked",
    "two-te",
    "two-lengths",
    "bad-length",
    "length-and-chunked",
    "control-in-value",
    "no-colon",
    "space-before-colon",
    "bad-chunk-size",
    "chunk-overrun",
    "extra-words",
    "bad-version",
    "control-in-target",
    "declared-too-large",
    "truncated-body",
)
# The flaws docs/contract.md's "Hostile input" table answers with a refusal *and a close*
# (a body whose framing is in doubt must not be read as the next request). The others get
# any answer but 200: a 404 for a target holding a NUL may keep the connection, and
# aiohttp lingers up to 10 s after a 413, reading what the client still sends, so that
# the client gets its answer before the close.
CLOSING_FLAWS = frozenset(
    {"te-not-chunked", "two-te", "two-lengths", "bad-length", "length-and-chunked"}
    | {"control-in-value"}
)
# Control characters a header value may not hold (RFC 9110 §5.5): all but HTAB.
VALUE_CONTROLS = bytes([*range(0x00, 0x09), *range(0x0B, 0x0D), *range(0x0E, 0x20), 0x7F])


@st.composite
def log_requests(draw: st.DrawFn) -> LogRequest:
    """A `/log` request: well formed (random method, query, headers, body, framing) or
    with one flaw of `LOG_FLAWS`."""
    method = draw(st.sampled_from(LOG_METHODS))
    target = b"/log" + draw(st.sampled_from([b"", b"?a=1", b"?q=%20x&y"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0"]))
    names = _token(16).filter(lambda n: n.lower() not in FRAMING_NAMES)
    fields = [
        name.encode() + b": " + value
        for name, value in draw(st.lists(st.tuples(names, _field_value_text()), max_size=5))
    ]
    fields.insert(0, b"Host: x")
    if draw(st.booleans()):
        fields.append(b"Connection: close")
    body = draw(st.one_of(st.binary(max_size=512), st.text(max_size=64).map(str.encode)))
    chunked = version == b"HTTP/1.1" and draw(st.booleans())
    extension = trailer = False
    if chunked:
        cuts = draw(st.lists(st.integers(0, 512), max_size=4))
        extension, trailer = draw(st.booleans()), draw(st.booleans())
        payload = chunked_body(body, cuts, extension, trailer)
        framing = [b"Transfer-Encoding: chunked"]
    else:
        payload = body
        framing = [b"Content-Length: %d" % len(body)]
    flaw = draw(st.one_of(st.just(""), st.just(""), st.sampled_from(LOG_FLAWS)))
    request_line = method + b" " + target + b" " + version
    complete = True
    if flaw == "te-not-chunked":
        framing = [b"Transfer-Encoding: " + draw(st.sampled_from(BAD_TRANSFER_ENCODINGS))]
        payload = chunked_body(body, [], False, False)
    elif flaw == "two-te":
        framing = [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"]
        payload = chunked_body(body, [], False, False)
    elif flaw == "two-lengths":
        framing = [b"Content-Length: %d" % len(body), b"Content-Length: %d" % (len(body) + 1)]
        payload = body + b"x"
    elif flaw == "bad-length":
        value = draw(st.sampled_from(sorted(BAD_CONTENT_LENGTHS)))
        framing = [b"Content-Length: " + value]
        payload = b"x" * (BAD_CONTENT_LENGTHS[value] or 0)
    elif flaw == "length-and-chunked":
        payload = chunked_body(body, [], False, False)
        framing = [b"Content-Length: %d" % len(payload), b"Transfer-Encoding: chunked"]
    elif flaw == "control-in-value":
        control = bytes([draw(st.sampled_from(VALUE_CONTROLS))])
        value = draw(_field_value_text())
        at = draw(st.integers(0, len(value)))
        fields.append(b"X-Bad: a" + value[:at] + control + value[at:] + b"z")
    elif flaw == "no-colon":
        fields.append(b"no colon " + draw(_token()).encode())
    elif flaw == "space-before-colon":
        fields.append(draw(_token()).encode() + b" : v")
    elif flaw == "bad-chunk-size":
        size = draw(st.sampled_from([b"zz", b"-1", b"0x5", b"", b"5 5", b"ffffffffffffffffffff"]))
        framing = [b"Transfer-Encoding: chunked"]
        payload = size + b"\r\nhello\r\n" + LAST_CHUNK
    elif flaw == "chunk-overrun":
        framing = [b"Transfer-Encoding: chunked"]
        payload = b"2\r\nhello\r\n" + LAST_CHUNK  # data longer than its size: no CRLF after 2
    elif flaw == "extra-words":
        request_line = method + b" " + target + b" " + version + b" extra"
    elif flaw == "bad-version":
        bad_version = draw(st.sampled_from([b"HTTP/1.1x", b"HTTP/9.9x", b"HTTPS/1.1"]))
        request_line = method + b" " + target + b" " + bad_version
    elif flaw == "control-in-target":
        control = draw(st.sampled_from([b"\x00", b"\x01", b"\x7f"]))
        request_line = method + b" /log" + control + b" " + version
    elif flaw == "declared-too-large":
        declared = draw(st.integers(contract.LOG_MAX_BODY_BYTES + 1, 2**40))
        framing = [b"Content-Length: %d" % declared]
        payload = b""
    elif flaw == "truncated-body":
        framing = [b"Content-Length: %d" % (len(body) + draw(st.integers(1, 1000)))]
        payload = body
        complete = False
    position = draw(st.integers(0, len(fields)))
    fields[position:position] = framing
    head = request_line + CRLF + b"".join(f + CRLF for f in fields) + CRLF
    refusable = (extension or trailer) and not flaw
    return LogRequest(head + payload, not flaw, flaw, complete, refusable)


def log_batches() -> st.SearchStrategy[list[LogRequest]]:
    """One to three `/log` requests, each sent on its own connection."""
    return st.lists(log_requests(), min_size=1, max_size=3)


# -- WebSocket scripts after a valid /ws handshake ---------------------------------------
TEXT, BINARY, CONTINUATION, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA
RESERVED_OPCODES = (0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF)
# Close codes a peer may not send (RFC 6455 §7.4; servers.core.websocket.peer_close_code_valid)
INVALID_CLOSE_CODES = (0, 999, 1004, 1005, 1006, 1015, 1016, 2000, 2999, 5000, 65535)
VALID_CLOSE_CODES = (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4000, 4999)
# Byte strings that are not UTF-8: a stray continuation byte, an overlong "/", a UTF-16
# surrogate, a code point past U+10FFFF, 0xFF, and a character cut short at the end.
INVALID_UTF8 = (b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xff", b"\xe2\x82")
# Text that is not a JSON object under RFC 8259, whatever the parser's extensions.
NOT_JSON_OBJECTS = (
    "not json",
    "[1, 2]",
    "1",
    '"s"',
    "null",
    "true",
    "{",
    '{"a": NaN}',
    '{"a": Infinity}',
    "{'a': 1}",
    '{"a": 1,}',
    "\ufeff{}",
    "",
)


# Nesting every server parses: deeper, the Python servers refuse a JSON object with 1007
# (their parser's recursion limit, about 1,000 levels; docs/contract.md), Node's takes it.
DEEPEST_NESTING_EVERYWHERE = 800


@dataclass(frozen=True)
class WsScript:
    """What a client sends on an upgraded `/ws` connection, and what it may get back.

    `sends` is the byte stream cut where the client pauses (frames split anywhere).
    `complete`: the stream ends with a whole frame the server must answer, a close frame
    or one it refuses; otherwise it stops mid-frame and the server may wait. `close_codes`
    are the codes the server's close frame may carry (None: a close frame without a code,
    or the connection dropped). `messages` counts the valid JSON-object text messages
    sent whole before anything refused: the records the sink may gain. `flaw` names what
    the server must refuse, if anything.
    """

    sends: tuple[bytes, ...]
    complete: bool
    close_codes: frozenset[int | None]
    messages: int
    flaw: str = ""


@dataclass(frozen=True)
class _Frame:
    """One frame to build: `ws_frame`'s arguments."""

    opcode: int
    payload: bytes = b""
    fin: bool = True
    mask: bool = True
    rsv: int = 0
    mask_key: bytes | None = None
    length_bytes: int | None = None
    declared_length: int | None = None


def _json_messages() -> st.SearchStrategy[bytes]:
    """Valid JSON objects as UTF-8: any text (multi-byte characters for the UTF-8 splits),
    nesting, numbers, and lengths at the frame-length boundaries (125/126, 65535/65536)."""
    leaves = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    values = st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    )
    objects = st.dictionaries(st.text(max_size=10), values, max_size=5).map(
        lambda d: json.dumps(d, ensure_ascii=False)
    )
    padded = st.tuples(
        st.sampled_from(["", " ", "\n", "\t\r\n "]), objects, st.sampled_from(["", " ", "\n"])
    ).map("".join)
    sized = st.integers(0, 70_000).map(lambda n: '{"k": "' + "é" * (n // 2) + '"}')
    boundary = st.sampled_from([116, 117, 118, 65526, 65527, 65528]).map(
        lambda n: '{"k": "' + "x" * n + '"}'  # 124..126 and 65534..65536 bytes
    )
    deep = st.integers(1, 3000).map(lambda d: '{"a": ' + "[" * d + "]" * d + "}")
    return st.one_of(padded, padded, padded, sized, boundary, deep).map(str.encode)


def _split(payload: bytes, draw: st.DrawFn, max_parts: int = 4) -> list[bytes]:
    """`payload` cut into fragments anywhere (inside a UTF-8 character too)."""
    cuts = draw(st.lists(st.integers(0, len(payload)), max_size=max_parts - 1))
    bounds = sorted({0, len(payload), *cuts})
    parts = [payload[a:b] for a, b in itertools.pairwise(bounds)]
    return parts or [b""]


def _controls(draw: st.DrawFn) -> list[_Frame]:
    """Pings and pongs a client may send at any point, between fragments too."""
    count = draw(st.integers(1, 2)) if _one_in(draw, 4) else 0
    return [
        _Frame(draw(st.sampled_from([PING, PONG])), draw(st.binary(max_size=125)))
        for _ in range(count)
    ]


def _frame_form(draw: st.DrawFn, frame: _Frame, length_ok: bool = True) -> _Frame:
    """A mask key (all-zero and all-ones included) and, sometimes, a longer length form
    than the payload needs (RFC 6455 §5.2 asks for the shortest: a server may refuse it)."""
    keys = st.one_of(st.binary(min_size=4, max_size=4), st.sampled_from([b"\0" * 4, b"\xff" * 4]))
    key = draw(keys)
    length_bytes = None
    if length_ok and _one_in(draw, 10):
        length_bytes = draw(st.sampled_from([2, 8]))
        if length_bytes == 2 and len(frame.payload) >= 1 << 16:
            length_bytes = 8
    return replace(frame, mask_key=key, length_bytes=length_bytes)


def _message_frames(draw: st.DrawFn, opcode: int, payload: bytes) -> list[_Frame]:
    parts = _split(payload, draw)
    frames: list[_Frame] = []
    for index, part in enumerate(parts):
        frames.append(
            _Frame(opcode if index == 0 else CONTINUATION, part, fin=index == len(parts) - 1)
        )
        if index < len(parts) - 1:
            frames += _controls(draw)
    return frames


def _flaw_frames(draw: st.DrawFn, flaw: str) -> tuple[list[_Frame], frozenset[int | None]]:
    """The frames of one refused thing, and the close codes it earns (docs/contract.md,
    "WebSocket"; RFC 6455 §5-§8)."""
    protocol = frozenset({contract.WS_CLOSE_PROTOCOL_ERROR})
    invalid = frozenset({contract.WS_CLOSE_INVALID_PAYLOAD})
    if flaw == "unmasked":
        return [_Frame(TEXT, b'{"a": 1}', mask=False)], protocol
    if flaw == "reserved-opcode":
        return [_Frame(draw(st.sampled_from(RESERVED_OPCODES)), b"x")], protocol
    if flaw == "rsv-bits":
        return [_Frame(TEXT, b'{"a": 1}', rsv=draw(st.integers(1, 7)))], protocol
    if flaw == "orphan-continuation":
        return [_Frame(CONTINUATION, b'{"a": 1}')], protocol
    if flaw == "data-inside-fragments":
        second = draw(st.sampled_from([TEXT, BINARY]))
        return [_Frame(TEXT, b'{"a"', fin=False), _Frame(second, b": 1}")], protocol
    if flaw == "long-control":
        opcode = draw(st.sampled_from([PING, PONG, CLOSE]))
        payload = (1000).to_bytes(2) + b"r" * 124 if opcode == CLOSE else b"p" * 126
        return [_Frame(opcode, payload)], protocol
    if flaw == "fragmented-control":
        return [_Frame(PING, b"p", fin=False), _Frame(CONTINUATION, b"q")], protocol
    if flaw == "invalid-utf8":
        text = draw(st.sampled_from(['{"a": "', '{"é": "ü', ""])).encode()
        bad = draw(st.sampled_from(INVALID_UTF8))
        tail = b"" if bad == b"\xe2\x82" else b'"}'  # a cut character ends the message
        return _message_frames(draw, TEXT, text + bad + tail), invalid
    if flaw == "not-a-json-object":
        return _message_frames(draw, TEXT, draw(st.sampled_from(NOT_JSON_OBJECTS)).encode()), (
            invalid
        )
    if flaw == "binary":
        payload = draw(st.binary(max_size=300))
        return _message_frames(draw, BINARY, payload), frozenset(
            {contract.WS_CLOSE_UNSUPPORTED_DATA}
        )
    if flaw == "invalid-close-code":
        return [_Frame(CLOSE, draw(st.sampled_from(INVALID_CLOSE_CODES)).to_bytes(2))], protocol
    if flaw == "one-byte-close":
        return [_Frame(CLOSE, b"\x03")], protocol
    if flaw == "close-reason-not-utf8":
        reason = draw(st.sampled_from(INVALID_UTF8))
        return [_Frame(CLOSE, (1000).to_bytes(2) + reason)], protocol | invalid
    # too-big: a header (or a continuation's header) declaring a message over the limit;
    # its payload never comes, the server refuses on the header (docs/contract.md)
    first = draw(st.integers(0, 100))
    over = contract.WS_MAX_MESSAGE_BYTES - first + draw(st.sampled_from([1, 2**20, 2**31]))
    frames = [_Frame(TEXT, b" " * first, fin=False)] if first else []
    opcode = CONTINUATION if first else TEXT
    frames.append(_Frame(opcode, b"", declared_length=over))
    return frames, frozenset({contract.WS_CLOSE_TOO_BIG})


WS_FLAWS = (
    "unmasked",
    "reserved-opcode",
    "rsv-bits",
    "orphan-continuation",
    "data-inside-fragments",
    "long-control",
    "fragmented-control",
    "invalid-utf8",
    "not-a-json-object",
    "binary",
    "invalid-close-code",
    "one-byte-close",
    "close-reason-not-utf8",
    "too-big",
)


@st.composite
def ws_scripts(draw: st.DrawFn) -> WsScript:
    """Valid messages (fragmented anywhere, controls between fragments, any mask key,
    any length form), then either a close the server must answer or one refused thing,
    and sometimes a stream cut short mid-frame."""
    frames: list[_Frame] = []
    messages = 0
    too_deep_somewhere = False
    for payload in draw(st.lists(_json_messages(), max_size=3)):
        frames += _controls(draw)
        frames += _message_frames(draw, TEXT, payload)
        messages += 1
        too_deep_somewhere |= payload.count(b"[") > DEEPEST_NESTING_EVERYWHERE
    flaw = draw(st.one_of(st.just(""), st.sampled_from(WS_FLAWS)))
    if flaw:
        bad_frames, close_codes = _flaw_frames(draw, flaw)
    else:
        code = draw(st.one_of(st.none(), st.sampled_from(VALID_CLOSE_CODES)))
        reason = draw(st.text(max_size=30)).encode()  # at most 120 bytes: a control frame's 125
        payload = b"" if code is None else code.to_bytes(2) + reason
        bad_frames = [_Frame(CLOSE, payload)]
        # the server echoes the client's code or answers 1000 (an empty close: no code)
        close_codes = frozenset({contract.WS_CLOSE_NORMAL, code})
    if too_deep_somewhere:  # refused there by the Python servers, before anything after it
        close_codes |= {contract.WS_CLOSE_INVALID_PAYLOAD}
    formed = [_frame_form(draw, f) for f in frames]
    formed += [_frame_form(draw, f, length_ok=False) for f in bad_frames]
    if any(f.length_bytes is not None for f in formed):
        close_codes |= {contract.WS_CLOSE_PROTOCOL_ERROR}  # a longer length form may be refused
    built = [
        ws_frame(
            f.opcode,
            f.payload,
            fin=f.fin,
            mask=f.mask,
            declared_length=f.declared_length,
            rsv=f.rsv,
            mask_key=f.mask_key,
            length_bytes=f.length_bytes,
        )
        for f in formed
    ]
    stream = b"".join(built)
    complete = True
    if _one_in(draw, 6):  # cut mid-frame: the server may wait for the rest
        cut = draw(st.integers(0, len(stream) - 1))
        messages = min(messages, _messages_ended(built, formed, cut))
        stream, complete = stream[:cut], False
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=3))
    bounds = sorted({0, len(stream), *cuts})
    sends = tuple(stream[a:b] for a, b in itertools.pairwise(bounds))
    return WsScript(sends, complete, frozenset(close_codes), messages, flaw)


def _messages_ended(built: list[bytes], formed: list[_Frame], cut: int) -> int:
    """How many messages end (a final text or continuation frame) within the first `cut`
    bytes: the valid ones come first, so the smaller of this and their count is theirs."""
    sent = ended = 0
    for frame_bytes, frame in zip(built, formed, strict=True):
        sent += len(frame_bytes)
        if sent <= cut and frame.fin and frame.opcode in (TEXT, CONTINUATION):
            ended += 1
    return ended


# -- HTTP/2 frames after a valid preface (RFC 9113 §4, §6) -------------------------------
H2_PING = b"fuzzping"  # the 8 bytes of the PING that ends every script
H2_END_STREAM = 0x1
H2_END_HEADERS = 0x4
# Every defined type, and ones no extension defines (a receiver must ignore those, §4.1).
H2_FRAME_TYPES = st.one_of(st.integers(0x0, 0x9), st.sampled_from([0xA, 0xB, 0x10, 0xFA, 0xFF]))
# The connection, the first streams a client may open, an even (server) one, and the last.
H2_STREAMS = st.one_of(st.sampled_from([0, 1, 3, 5, 2, 2**31 - 1]), st.integers(0, 2**31 - 1))


@dataclass(frozen=True)
class H2Script:
    """Frames to send after the preface and SETTINGS; `complete` when each frame's header
    declares its own payload's length (the PING after them is then a whole frame a live
    connection answers)."""

    frames: tuple[bytes, ...]
    complete: bool


def h2_request_block(path: str = contract.ROUTE_TEXT) -> bytes:
    """The HPACK block of a valid `GET path` (a fresh encoder: no dynamic table needed)."""
    return Encoder().encode(
        [(":method", "GET"), (":scheme", "https"), (":path", path), (":authority", "x")]
    )


@st.composite
def _h2_frame(draw: st.DrawFn) -> tuple[bytes, bool]:
    """One frame (its bytes, whether its header declares its payload's length): a valid
    request's HEADERS at times, else any type, flags, stream and payload."""
    stream_id = draw(H2_STREAMS)
    if draw(st.integers(0, 4)) == 0:
        flags = H2_END_HEADERS | draw(st.sampled_from([0, H2_END_STREAM]))
        return h2_frame(FRAME_HEADERS, h2_request_block(), flags=flags, stream_id=stream_id), True
    frame_type = draw(H2_FRAME_TYPES)
    payload = draw(st.binary(max_size=48))
    if frame_type in (FRAME_HEADERS, FRAME_CONTINUATION) and draw(st.booleans()):
        payload = h2_request_block()[: draw(st.integers(0, 20))] + payload  # HPACK, cut
    flags = draw(st.integers(0, 0xFF))
    if draw(st.integers(0, 5)) == 0:  # a header declaring another length than the payload's
        declared = draw(st.integers(0, 64))
        frame = h2_frame(frame_type, payload, flags=flags, stream_id=stream_id)
        return declared.to_bytes(3) + frame[3:], declared == len(payload)
    return h2_frame(frame_type, payload, flags=flags, stream_id=stream_id), True


@st.composite
def h2_scripts(draw: st.DrawFn) -> H2Script:
    """One to six frames, then a PING (a live connection answers it with an ACK)."""
    drawn = draw(st.lists(_h2_frame(), min_size=1, max_size=6))
    frames = tuple(frame for frame, _ in drawn)
    return H2Script(frames, complete=all(whole for _, whole in drawn))

"""The server wire contract: the one place it lives.

Every framework server and every test imports these names, so a route, a payload, a limit
or a telemetry field is written exactly once (docs/contract.md describes it for readers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# -- routes -----------------------------------------------------------------------------
ROUTE_TEXT = "/"
ROUTE_COUNTER = "/counter"
ROUTE_LOG = "/log"
ROUTE_FILES_PREFIX = "/files/"
ROUTE_GRIDFS_PREFIX = "/gridfs/"
ROUTE_MEMCACHED_PREFIX = "/mc/"
ROUTE_WEBSOCKET = "/ws"
# The public boards' workloads (docs/contract.md, "The boards' workloads"): TechEmpower's
# JSON and plaintext test types, HttpArena's delay (its `async` profile), upload and
# json-comp, and Granian's 10 KB body.
ROUTE_JSON = "/json"
ROUTE_PLAINTEXT = "/plaintext"
ROUTE_DELAY_PREFIX = "/delay/"
ROUTE_UPLOAD = "/upload"
ROUTE_JSON_COMP = "/json-comp"
ROUTE_BODY_10K = "/body/10k"
WORKLOAD_ROUTES = (
    ROUTE_JSON,
    ROUTE_PLAINTEXT,
    ROUTE_DELAY_PREFIX,
    ROUTE_UPLOAD,
    ROUTE_JSON_COMP,
    ROUTE_BODY_10K,
)
ALL_ROUTES = (
    ROUTE_TEXT,
    ROUTE_COUNTER,
    ROUTE_LOG,
    ROUTE_FILES_PREFIX,
    ROUTE_GRIDFS_PREFIX,
    ROUTE_MEMCACHED_PREFIX,
    ROUTE_WEBSOCKET,
    *WORKLOAD_ROUTES,
)

# -- payloads ---------------------------------------------------------------------------
TEXT_BODY = b"I am a stupid HTTP server!"
TEXT_CONTENT_TYPE = "text/plain"
JSON_CONTENT_TYPE = "application/json"
LOG_REPLY_BODY = b"success"
# The largest `/log` body (aiohttp's `client_max_size` default): a bigger one is answered
# 413 and the connection closed, judged by the declared Content-Length before any of the
# body is read, and by the bytes received for a chunked body (docs/contract.md).
LOG_MAX_BODY_BYTES = 1024 * 1024
COUNTER_FIELDS = ("open", "max_open", "requests")
# `id` is unique across every server process of a run ("<worker>-<pid>-<seq>"): the
# harness reconciles acknowledged records with stored ones by it (`seq` is per process).
RECORD_FIELDS = ("id", "seq", "time", "method", "path", "headers", "body")
# /ws messages are stored with the same record shape as /log requests.
WEBSOCKET_RECORD_METHOD = "WS"

# -- the boards' workloads (docs/contract.md, "The boards' workloads") -------------------
# TechEmpower's JSON test type: this object, serialized anew for every request.
JSON_MESSAGE = {"message": "Hello, World!"}
PLAINTEXT_BODY = b"Hello, World!"  # TechEmpower's plaintext test type
PIPELINE_DEPTH = 16  # requests per write on /plaintext (TechEmpower's pipeline.lua)
BODY_10K_BYTES = 10 * 1024  # Granian's "get 10KB" table
BODY_10K = (b"0123456789abcdef" * (BODY_10K_BYTES // 16 + 1))[:BODY_10K_BYTES]
# `/delay/{ms}`: whole milliseconds, at most this many; anything else is answered 400.
DELAY_MAX_MS = 10_000
BAD_REQUEST_STATUS = 400
# `/upload`: the body's byte count is the reply (decimal, text/plain); a body over this
# is refused 413 (a declared length before any is read), one shorter than its declared
# Content-Length is no upload (the connection closes, nothing counted answered 200).
UPLOAD_MAX_BODY_BYTES = LOG_MAX_BODY_BYTES
UPLOAD_SIZES_BYTES = (64 * 1024, 1024 * 1024)  # HttpArena's upload, scaled: the profile's
# `/json-comp`: HttpArena's json-comp, a ~10 KB JSON document, gzip-encoded when the
# request's Accept-Encoding names gzip, identity otherwise (Vary: Accept-Encoding).
JSON_COMP_ITEMS = 88  # 10.2 KB serialized compactly
JSON_COMP_DOCUMENT = {
    "items": [
        {
            "id": i,
            "name": f"item-{i:03d}",
            "category": ("tools", "books", "music", "garden")[i % 4],
            "price_cents": 100 + 37 * i,
            "tags": ["boards", "workload", f"t{i % 7}"],
            "in_stock": i % 3 != 0,
        }
        for i in range(JSON_COMP_ITEMS)
    ]
}
GZIP_LEVEL = 1  # per request, the fastest: the workload measures the server, not zlib's best
# The non-Python servers (Node, Ruby) get the values above in this environment variable,
# JSON (`workload_values`), set by `python -m servers` when it execs them.
WORKLOADS_ENV = "SERVERBENCH_WORKLOADS"


def workload_values() -> dict[str, object]:
    """The workloads' values as the non-Python servers read them (WORKLOADS_ENV)."""
    return {
        "json_message": JSON_MESSAGE,
        "plaintext_body": PLAINTEXT_BODY.decode(),
        "body_10k": BODY_10K.decode(),
        "delay_max_ms": DELAY_MAX_MS,
        "upload_max_body_bytes": UPLOAD_MAX_BODY_BYTES,
        "json_comp_document": JSON_COMP_DOCUMENT,
        "gzip_level": GZIP_LEVEL,
    }


# -- static files, GridFS and memcached (the autobench and memcached-proxy studies) ------
# A file name is one path segment of these characters, not starting with a dot; anything
# else (../, encoded slashes, absolute paths, hidden files) is 404 (servers/core/static.py).
FILE_NAME_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
FILE_CONTENT_TYPES = {
    ".jpg": "image/jpeg",
    ".png": "image/png",
    ".gif": "image/gif",
    ".txt": "text/plain",
}
DEFAULT_CONTENT_TYPE = "application/octet-stream"
GRIDFS_DATABASE = "harness"  # the default --mongo-db (the mongo sink's too), bucket "fs"
# A `--mongo-db` name: the harness gives every run a database of its own (harness_<run>),
# so that a user's MongoDB keeps what it held; MongoDB's own rule is looser.
MONGO_DB_PATTERN = r"[A-Za-z0-9_-]{1,63}"
GRIDFS_BUCKET = "fs"
MC_POOL_SIZE = 50  # persistent connections from each server process to memcached
MC_VALUE_BYTES = 100  # the memcached-proxy study's value
MC_MAX_KEY_BYTES = 250  # memcached's own key limit
MC_CONTENT_TYPE = "application/octet-stream"
MC_TIMEOUT_S = 2.0  # connecting to memcached, and waiting for one reply: then 503
# The mongo sink's write deadline (sinks.MONGO_WRITE_TIMEOUT_MS, which says why); the
# --write-timeout-s option may only shorten it
MONGO_WRITE_TIMEOUT_S = 10.0
# The memcached socket service (`--mc-socket-port`, the memcached-proxy study's socket
# service): each connection's request lines are answered in the order they came, with at
# most this many gets in flight to memcached at once; later lines wait, unread, in the
# connection's buffer, and the answers to lines that arrived together may leave together.
# One, so a client that pipelines gets no more of the pool than one that waits for each
# answer (mcload does): the service's concurrency is its connections, on every server.
MC_SOCKET_MAX_IN_FLIGHT = 1
NOT_FOUND_BODY = b"not found"
UNAVAILABLE_STATUS = 503  # a backend (database, memcached) or the sink is down or gone
BACKEND_UNAVAILABLE_BODY = b"backend unavailable"  # /gridfs and /mc answering 503
SINK_UNAVAILABLE_BODY = b"sink unavailable"  # /log answering 503

# -- WebSocket rules --------------------------------------------------------------------
WS_SUBPROTOCOL = "myprotocol"
WS_ORIGIN = "agent"
WS_BAD_ORIGIN_STATUS = 403  # an Origin other than WS_ORIGIN
WS_NO_SUBPROTOCOL_STATUS = 400  # a handshake that does not offer WS_SUBPROTOCOL
WS_MAX_MESSAGE_BYTES = 1024 * 1024
WS_CLOSE_NORMAL = 1000
WS_CLOSE_GOING_AWAY = 1001  # server shutting down
WS_CLOSE_PROTOCOL_ERROR = 1002  # RFC 6455: an unmasked client frame, an invalid close code
WS_CLOSE_UNSUPPORTED_DATA = 1003  # a binary message
WS_CLOSE_INVALID_PAYLOAD = 1007  # text that is not a JSON object
WS_CLOSE_TOO_BIG = 1009  # a message over WS_MAX_MESSAGE_BYTES
WS_CLOSE_TRY_AGAIN_LATER = 1013  # the sink's queue is full (WS_SINK_MAX_PENDING)
# WebSocket messages waiting for the mongo sink's inserts, per server process: a message
# finding this many closes its connection with WS_CLOSE_TRY_AGAIN_LATER and counts in
# `sink_errors`, so a slow or stopped database costs bounded memory on every runtime.
WS_SINK_MAX_PENDING = 1024
# The mongo sink's group commit (docs/contract.md, "Sinks"): records waiting for the
# database go out together, one ordered `insert_many` of at most this many, as soon as the
# previous batch of the process returned, or at once when this many wait. `--mongo-batch N`
# changes it per server (1: one insert per record, the seed study's shape), up to
# MONGO_BATCH_LIMIT, MongoDB's own maxWriteBatchSize.
MONGO_BATCH_MAX_RECORDS = 100
MONGO_BATCH_LIMIT = 100_000

# -- process model and timing -----------------------------------------------------------
TICK_INTERVAL_S = 0.010  # the studies' event-loop probe: a 10 ms timer
TELEMETRY_INTERVAL_S = 1.0
SHUTDOWN_GRACE_S = 5.0  # SIGTERM: exit 0 within this

# -- slow clients (docs/contract.md, "Slow clients") --------------------------------------
# A connection must deliver a whole request head within HEAD_TIMEOUT_S of opening or of
# its previous response being sent (so an idle keep-alive connection is closed after it
# too), and a request's whole body within BODY_TIMEOUT_S of its head; otherwise the server
# closes the connection (a 408 may go first) and stores nothing. Deadlines, not idle
# timers: a client trickling a byte a second does not keep a connection open. Upgraded
# WebSocket connections and the memcached socket service are not subject to them.
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
LISTEN_BACKLOG = 65535  # the kernel caps it at net.core.somaxconn

SINKS = ("empty", "file", "mongo")
# The environment variable that gives a server the mongo sink's (and /gridfs's) MongoDB URL
# when --mongo-url is not on its command line: the harness gives it so, since a command
# line is shown to every user of the machine (`ps`) and the URL may hold a password.
MONGO_URL_ENV = "SERVERBENCH_MONGO_URL"

# -- protocols (docs/contract.md, "Protocols") --------------------------------------------
# What a case speaks on the wire: cleartext HTTP/1.1 (today's figures), HTTP/1.1 over TLS
# 1.3, HTTP/2 over TLS (ALPN "h2"), and cleartext HTTP/2 with prior knowledge (h2c).
PROTOCOL_H1 = "h1"
PROTOCOL_H1_TLS = "h1-tls"
PROTOCOL_H2 = "h2"
PROTOCOL_H2C = "h2c"
PROTOCOLS = (PROTOCOL_H1, PROTOCOL_H1_TLS, PROTOCOL_H2, PROTOCOL_H2C)
TLS_PROTOCOLS = (PROTOCOL_H1_TLS, PROTOCOL_H2)
# The ALPN identifier a TLS server must select for each TLS protocol (RFC 7301, RFC 9113).
ALPN_FOR_PROTOCOL = {PROTOCOL_H1_TLS: "http/1.1", PROTOCOL_H2: "h2"}
TLS_MINIMUM_VERSION = "TLSv1.3"  # every TLS case: what production terminates today
# The TLS connection's names a server certificate must cover (docs/contract.md).
TLS_SERVER_NAMES = ("localhost", "127.0.0.1", "::1")


# -- HTTP/2 limits (docs/contract.md, "HTTP/2 limits") ------------------------------------
# What one HTTP/2 connection may send that costs the server work without progress: of each
# kind, at most `base + per_progress × progress` frames over the connection's life, where
# progress is its completed responses plus every 16 KiB of body received or sent
# (servers/core/h2_budget.py counts). Past one the server sends GOAWAY ENHANCE_YOUR_CALM
# and closes. Relative to progress, so that no well-behaved client ever meets them (an
# h2load run's thousands of requests per connection, a browser's cancelled streams, its
# keep-alive PINGs), while a flood of frames that serve nobody is cut within a few
# thousand frames.
@dataclass(frozen=True)
class H2Limit:
    """An allowance of one kind of frame: `base`, and `per_progress` more per unit of
    progress (a completed response, 16 KiB of body)."""

    base: int
    per_progress: float

    def __post_init__(self) -> None:
        if self.base < 0 or self.per_progress < 0:
            raise ValueError(f"an H2Limit is never negative: {self}")


H2_LIMITS: dict[str, H2Limit] = {
    # RST_STREAM from the client (rapid reset: HEADERS then RST_STREAM, over and over)
    "reset": H2Limit(base=100, per_progress=1.0),
    # PING (not ACK): keep-alive pings are one every few seconds at most
    "ping": H2Limit(base=1000, per_progress=1.0),
    # SETTINGS (not ACK): a client sends one, and a few more at most
    "settings": H2Limit(base=100, per_progress=1.0),
    # DATA frames without END_STREAM and under H2_SMALL_DATA_BYTES (empty ones above all)
    "small-data": H2Limit(base=1000, per_progress=1.0),
    # WINDOW_UPDATE: a client reading a response sends one per stream and one for the
    # connection per DATA frame at most (16 KiB each: one unit of progress)
    "window-update": H2Limit(base=1000, per_progress=4.0),
    # PRIORITY: a browser sends a few per stream (deprecated by RFC 9113, still sent)
    "priority": H2Limit(base=1000, per_progress=2.0),
}
H2_SMALL_DATA_BYTES = 16  # a DATA frame shorter than this, not ending its stream, is small
# One header block (HEADERS and its CONTINUATION frames): at most this many bytes and this
# many CONTINUATION frames (the h2 library's own CONTINUATION backlog is 64)
H2_MAX_HEADER_BLOCK_BYTES = 64 * 1024
H2_MAX_CONTINUATION_FRAMES = 64
H2_ENHANCE_YOUR_CALM = 0xB  # the GOAWAY error code a connection past a limit gets

# -- telemetry line ---------------------------------------------------------------------
# docs/contract.md fixes the first fourteen; the rest say which process and loop produced
# it, where its memcached socket service listens (`mc_port`, a name recorded runs use) and
# how many backend reads failed.
TELEMETRY_FIELDS = (
    "t",
    "pid",
    "open",
    "max_open",
    "requests",
    "messages",
    "bad",
    "tick_avg_ms",
    "tick_max_ms",
    "gc_collections",
    "gc_pause_ms",
    "stored",
    "sink_errors",
    "backlog",
    "rss_bytes",
    "framework",
    "loop",
    "port",
    "worker",
    "mc_port",
    "backend_errors",
)


@dataclass(frozen=True)
class ServerOptions:
    """What `python -m servers NAME ...` was asked for; handed to each framework's `serve`."""

    framework: str
    host: str = "127.0.0.1"
    port: int = 0
    sink: str = "empty"
    sink_path: str | None = None
    mongo_url: str | None = None
    mongo_w: int = 1
    mongo_db: str = GRIDFS_DATABASE  # the mongo sink's records and GridFS's bucket
    mongo_batch: int = MONGO_BATCH_MAX_RECORDS  # records per insert_many, at most
    # --durable: a record is acknowledged once it is on disk (file: fsync per batch;
    # mongo: journaled, j: true) instead of once write(2) returned / the insert was
    # acknowledged (w: 1, no journal)
    durable: bool = False
    files_dir: str | None = None
    memcached: str | None = None
    mc_socket_port: int | None = None  # the memcached socket service's port
    workers: int = 1
    loop: str | None = None  # None: the framework's default loop (servers.FRAMEWORKS)
    # --client-timeout-s: both slow-client deadlines at once (tests, short runs); None:
    # HEAD_TIMEOUT_S and BODY_TIMEOUT_S
    client_timeout_s: float | None = None
    # --write-timeout-s: the mongo sink's write deadline, shorter (tests); None:
    # MONGO_WRITE_TIMEOUT_S
    write_timeout_s: float | None = None
    protocol: str = PROTOCOL_H1  # one of PROTOCOLS
    tls_cert: str | None = None  # PEM certificate chain (TLS protocols only)
    tls_key: str | None = None  # PEM private key of that certificate

    @property
    def tls(self) -> bool:
        """Whether this server speaks TLS on its port."""
        return self.protocol in TLS_PROTOCOLS

    @property
    def head_timeout_s(self) -> float:
        """Seconds a connection has to deliver a whole request head (HEAD_TIMEOUT_S)."""
        return HEAD_TIMEOUT_S if self.client_timeout_s is None else self.client_timeout_s

    @property
    def body_timeout_s(self) -> float:
        """Seconds a request has to deliver its whole body after its head (BODY_TIMEOUT_S)."""
        return BODY_TIMEOUT_S if self.client_timeout_s is None else self.client_timeout_s

    def __post_init__(self) -> None:
        if self.sink not in SINKS:
            raise ValueError(f"sink {self.sink!r} is not one of {', '.join(SINKS)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is outside 0..65535")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")
        if self.mongo_w not in (0, 1):
            raise ValueError(f"mongo_w must be 0 or 1, not {self.mongo_w}")
        if not 1 <= self.mongo_batch <= MONGO_BATCH_LIMIT:
            limit = MONGO_BATCH_LIMIT
            raise ValueError(f"mongo_batch must be in 1..{limit}, not {self.mongo_batch}")
        if not re.fullmatch(MONGO_DB_PATTERN, self.mongo_db):
            raise ValueError(f"mongo_db {self.mongo_db!r} does not match {MONGO_DB_PATTERN}")
        if self.durable and self.sink == "mongo" and self.mongo_w == 0:
            raise ValueError("durable needs an acknowledged write: mongo_w 1, not 0")
        if self.client_timeout_s is not None and not 0 < self.client_timeout_s <= 3600:
            raise ValueError(f"client_timeout_s must be in (0, 3600], not {self.client_timeout_s}")
        limit_s = MONGO_WRITE_TIMEOUT_S
        if self.write_timeout_s is not None and not 0 < self.write_timeout_s <= limit_s:
            raise ValueError(
                f"write_timeout_s must be in (0, {limit_s:g}], not {self.write_timeout_s}"
            )
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.tls and not (self.tls_cert and self.tls_key):
            raise ValueError(f"protocol {self.protocol} needs --tls-cert and --tls-key")
        if not self.tls and (self.tls_cert or self.tls_key):
            raise ValueError(f"protocol {self.protocol} is cleartext: no --tls-cert/--tls-key")

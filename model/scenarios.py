"""Scenarios: what each request of a load step asks the server for.

A scenario is the same for every driver and every framework; drivers translate it into
their own options (a wrk Lua script, httperf's --uri/--method, ab's -p, a siege URL line).
"""

from __future__ import annotations

from dataclasses import dataclass

from model.errors import UserError
from servers import contract

# The memcached scenarios' key and its 100-byte value (the value the memcached study fetched).
MC_KEY = "mcvalue"
MC_VALUE = bytes(range(33, 33 + contract.MC_VALUE_BYTES))  # 100 printable bytes
# The boards' workloads: the delay scenario's wait (Granian's "10 ms of I/O" table) and the
# upload scenarios' bodies (HttpArena's upload, at the contract's two default sizes).
DELAY_MS = 10
# The delay profile's wait: on a busy 2-core host a 10 ms wait's p99 is past 2 × 10 ms at 4
# connections already (scheduling, not the server), so the held reading uses 100 ms.
LONG_DELAY_MS = 100
UPLOAD_BODIES = {size: b"u" * size for size in contract.UPLOAD_SIZES_BYTES}
# What a driver must do beyond one request at a time (its `features`): send requests
# pipelined on a connection, or send the scenario's own headers.
PIPELINING = "pipelining"
HEADERS = "headers"


def _size_text(size_bytes: int) -> str:
    """64 KiB, 1 MiB: a body size as its scenario's description says it."""
    if size_bytes >= 1 << 20:
        return f"{size_bytes / (1 << 20):g} MiB"
    return f"{size_bytes / 1024:g} KiB"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    method: str
    path: str
    body: bytes | None = None
    content_type: str | None = None
    # Replies whose length legitimately varies (e.g. /counter): ab's "Length" failures
    # are then artefacts of its first-reply comparison, not errors (the process-model study).
    body_length_varies: bool = False
    # Requests that store a record: a file or mongo sink makes a difference.
    stores_records: bool = False
    # WebSocket scenarios run a connection ramp with the agent instead of an HTTP driver.
    websocket: bool = False
    payload: str | None = None  # drivers.agent.payloads name; None: idle connections
    message_interval_s: tuple[float, float] = (3.0, 6.0)  # uniform(3, 6) s (the WebSocket study)
    # What the server needs beside its sink (harness.services.backends starts it): "files" (the file
    # set on disk), "gridfs" (the set in GridFS), "memcached" (the memcached-proxy study's
    # 100-byte value).
    backend: str | None = None
    # each request asks for a random file of the set (the autobench study)
    random_paths: bool = False
    # every reply is compared with the expected value (the memcached-proxy study)
    check_body: bool = False
    protocol: str = "http"  # "memcached": the --mc-socket-port socket service
    # requests written at once on a connection, their replies read in order (TechEmpower's
    # plaintext: 16); 1: one request at a time
    pipeline_depth: int = 1
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request

    def __post_init__(self) -> None:
        if not 1 <= self.pipeline_depth <= 256:
            raise ValueError(f"pipeline_depth must be in 1..256, not {self.pipeline_depth}")

    @property
    def needs(self) -> frozenset[str]:
        """What a driver must be able to do to run it (PIPELINING, HEADERS)."""
        return frozenset(
            ([PIPELINING] if self.pipeline_depth > 1 else []) + ([HEADERS] if self.headers else [])
        )

    @property
    def route(self) -> str:
        """The contract route it exercises: a server must serve it to run the scenario."""
        if self.protocol == "memcached":
            return contract.ROUTE_MEMCACHED_PREFIX
        for prefix in (
            contract.ROUTE_FILES_PREFIX,
            contract.ROUTE_GRIDFS_PREFIX,
            contract.ROUTE_MEMCACHED_PREFIX,
            contract.ROUTE_DELAY_PREFIX,
        ):
            if self.path.startswith(prefix):
                return prefix
        return self.path


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "text", "GET / — the fixed text body (the autobench study)", "GET", contract.ROUTE_TEXT
        ),
        Scenario(
            "counter",
            "GET /counter — open/max-open connections, changing length (the affinity study)",
            "GET",
            contract.ROUTE_COUNTER,
            body_length_varies=True,
        ),
        Scenario(
            "log",
            "POST /log — each request becomes a sink record (the process-model study)",
            "POST",
            contract.ROUTE_LOG,
            body=b'{"event": "click", "user": 12345, "page": "/index.html"}',
            content_type="application/json",
            stores_records=True,
        ),
        Scenario(
            "files",
            "GET /files/{random name} — the image-like file set from disk "
            "(the autobench study, test 3)",
            "GET",
            contract.ROUTE_FILES_PREFIX,
            body_length_varies=True,
            backend="files",
            random_paths=True,
        ),
        Scenario(
            "gridfs",
            "GET /gridfs/{random name} — the same files from MongoDB GridFS "
            "(the autobench study, test 4)",
            "GET",
            contract.ROUTE_GRIDFS_PREFIX,
            body_length_varies=True,
            backend="gridfs",
            random_paths=True,
        ),
        Scenario(
            "memcache-http",
            f"GET /mc/{MC_KEY} — a 100-byte memcached value through the pool, every answer "
            "checked (the memcached-proxy study)",
            "GET",
            contract.ROUTE_MEMCACHED_PREFIX + MC_KEY,
            backend="memcached",
            check_body=True,
        ),
        Scenario(
            "memcache-socket",
            f"get {MC_KEY} on the --mc-socket-port socket service over long-lived connections, "
            "every answer checked (the memcached-proxy study)",
            "GET",
            MC_KEY,  # the memcached key: this scenario speaks the memcached protocol
            backend="memcached",
            check_body=True,
            protocol="memcached",
        ),
        Scenario(
            "ws-idle",
            "WebSocket connections held idle (the WebSocket study phase 1)",
            "GET",
            contract.ROUTE_WEBSOCKET,
            websocket=True,
        ),
        Scenario(
            "ws-short",
            'WebSocket, each sends {"a": "b"} every 3–6 s (the WebSocket study phase 2)',
            "GET",
            contract.ROUTE_WEBSOCKET,
            websocket=True,
            stores_records=True,
            payload="short",
        ),
        Scenario(
            "ws-long",
            "WebSocket, each sends ~7,000 characters every 3–6 s (phase 2)",
            "GET",
            contract.ROUTE_WEBSOCKET,
            websocket=True,
            stores_records=True,
            payload="long",
        ),
        *(
            # the boards' workloads (docs/contract.md, "The boards' workloads")
            Scenario(
                "json",
                "GET /json — a JSON message serialized per request (TechEmpower's JSON test "
                "type, HttpArena's json)",
                "GET",
                contract.ROUTE_JSON,
            ),
            Scenario(
                "plaintext",
                f"GET /plaintext — {contract.PIPELINE_DEPTH} requests pipelined per write "
                "(TechEmpower's plaintext test type, HttpArena's pipelined)",
                "GET",
                contract.ROUTE_PLAINTEXT,
                pipeline_depth=contract.PIPELINE_DEPTH,
            ),
            *(
                Scenario(
                    name,
                    f"GET /delay/{delay_ms} — answered after {delay_ms} ms on the server's own "
                    f"timer: requests held in flight ({source})",
                    "GET",
                    contract.ROUTE_DELAY_PREFIX + str(delay_ms),
                )
                for name, delay_ms, source in (
                    ("delay", DELAY_MS, "HttpArena's async, Granian's 10 ms of I/O"),
                    ("delay-100", LONG_DELAY_MS, "HttpArena's async, a wait host noise spares"),
                )
            ),
            *(
                Scenario(
                    name,
                    f"POST /upload — a {_size_text(size)} body, answered with its byte count "
                    "(HttpArena's upload)",
                    "POST",
                    contract.ROUTE_UPLOAD,
                    body=UPLOAD_BODIES[size],
                    content_type="application/octet-stream",
                )
                for name, size in zip(
                    ("upload", "upload-1m"), contract.UPLOAD_SIZES_BYTES, strict=True
                )
            ),
            Scenario(
                "json-comp",
                "GET /json-comp — a ~10 KB JSON document gzip-encoded per request "
                "(HttpArena's json-comp)",
                "GET",
                contract.ROUTE_JSON_COMP,
                headers=(("Accept-Encoding", "gzip"),),
            ),
            Scenario(
                "body-10k",
                'GET /body/10k — a 10 KB body (Granian\'s "get 10KB" table)',
                "GET",
                contract.ROUTE_BODY_10K,
            ),
        ),
    )
}


def is_delay(name: str) -> bool:
    """Whether the scenario called `name` waits on `/delay/{ms}` (an unknown name: no)."""
    scenario = SCENARIOS.get(name)
    return scenario is not None and scenario.route == contract.ROUTE_DELAY_PREFIX


def get_scenario(name: str) -> Scenario:
    """The scenario called `name`; an unknown name lists the valid ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UserError(f"unknown scenario {name}: choose from {', '.join(SCENARIOS)}") from None

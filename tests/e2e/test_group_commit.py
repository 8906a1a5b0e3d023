"""The mongo sink's group commit on every server that has one, against real FerretDB.

A recording proxy between the server and FerretDB reads every `insert` command the server
sends (MongoDB's OP_MSG) and can hold each one back a little, so that records pile up
behind a batch in flight, or cut the connection carrying one, so that one batch fails
while the others succeed. The database is also killed outright mid-load and restarted.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bson
import httpx
import pytest

from harness.server_process import start_server
from harness.services.ferretdb import FerretDB
from harness.services.sink_store import SinkStore
from servers import FRAMEWORKS, contract
from servers.core.sinks import MONGO_COLLECTION, MONGO_SERVER_SELECTION_TIMEOUT_MS
from tests.helpers import SHARED_RUNTIME, one_per_runtime, require_ferretdb, require_framework

MONGO_SERVERS = [name for name, f in FRAMEWORKS.items() if "mongo" in f.sinks]
OP_MSG = 2013
REQUESTS = 200
CONNECTIONS = 40


# -- a proxy that reads the server's inserts ---------------------------------------------------
def insert_documents(message: bytes) -> list[dict[str, object]] | None:
    """The documents of an OP_MSG `insert` into the records collection, else None."""
    _length, _request, _response_to, opcode = struct.unpack_from("<iiii", message)
    if opcode != OP_MSG:
        return None
    (flags,) = struct.unpack_from("<I", message, 16)
    end = len(message) - (4 if flags & 1 else 0)  # checksumPresent
    position, body, sequences = 20, None, {}
    while position < end:
        kind = message[position]
        position += 1
        (size,) = struct.unpack_from("<i", message, position)
        section = message[position : position + size]
        if kind == 0:
            body = bson.decode(section)
        else:  # a document sequence: size, identifier, documents
            name_end = section.index(b"\0", 4)
            sequences[section[4:name_end].decode()] = bson.decode_all(section[name_end + 1 :])
        position += size
    if body is None or body.get("insert") != MONGO_COLLECTION:
        return None
    return sequences.get("documents") or body.get("documents") or []


@dataclass
class RecordingProxy:
    """Forwards 127.0.0.1:port to `upstream`; records each insert's documents.

    `delay_s` holds every insert back that long (records pile up behind it). With
    `cut_after` N, the first insert after the N-th that holds more than one record (a
    batch) is not forwarded: its connection is cut instead, and its documents are kept in
    `cut`. With `stall_after` N, every insert after the N-th is swallowed: neither
    forwarded nor answered, its connection left open (a database that stops answering).
    """

    upstream: int
    delay_s: float = 0.0
    cut_after: int | None = None
    stall_after: int | None = None
    inserts: list[list[dict[str, object]]] = field(default_factory=list)
    cut: list[dict[str, object]] | None = None

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                data = client.recv(1 << 16)
                if not data:
                    break
                buffer += data
                while len(buffer) >= 4:
                    size = int.from_bytes(buffer[:4], "little")
                    if len(buffer) < size:
                        break
                    message, buffer = buffer[:size], buffer[size:]
                    documents = insert_documents(message)
                    if documents is not None:
                        with self._lock:
                            self.inserts.append(documents)
                            number = len(self.inserts)
                        if self._cuts(number, documents):
                            raise OSError("cut")  # closes both sides below, unforwarded
                        if self.stall_after is not None and number > self.stall_after:
                            continue  # swallowed: no reply will ever come
                        time.sleep(self.delay_s)
                    server.sendall(message)
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _cuts(self, number: int, documents: list[dict[str, object]]) -> bool:
        """Whether insert `number` is the one to cut (then kept in `cut`)."""
        with self._lock:
            if self.cut_after is None or self.cut is not None or number <= self.cut_after:
                return False
            if len(documents) < 2:
                return False
            self.cut = documents
            return True

    def _replies(self, server: socket.socket, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(1 << 16):
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)

    def forwarded_sizes(self) -> list[int]:
        """Documents per insert that reached the database."""
        with self._lock:
            return [len(docs) for docs in self.inserts if docs is not self.cut]

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()


@contextlib.contextmanager
def proxied_sink(
    ferretdb: FerretDB,
    framework: str,
    database: str,
    extra_args: list[str] | None = None,
    **proxy_options: object,
) -> Iterator[tuple[object, SinkStore, RecordingProxy]]:
    """A server whose mongo sink reaches FerretDB through a RecordingProxy; `extra_args`
    are more of the server's options."""
    require_framework(framework)
    proxy = RecordingProxy(ferretdb.port, **proxy_options)  # type: ignore[arg-type]
    try:
        with SinkStore("mongo", mongo_url=ferretdb.url, mongo_db=database) as store:
            args = ["--mongo-url", proxy.url, "--mongo-db", database, *(extra_args or [])]
            with start_server(framework, sink="mongo", extra_args=args) as server:
                yield server, store, proxy
    finally:
        proxy.close()


def post_concurrently(url: str, bodies: list[str], extra: list[str] | None = None) -> list[int]:
    """POST /log once per body over CONNECTIONS keep-alive connections; the statuses."""

    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
            replies = await asyncio.gather(
                *(client.post(contract.ROUTE_LOG, content=body) for body in bodies)
            )
        return [reply.status_code for reply in replies]

    return asyncio.run(run())


def stored_bodies(store: SinkStore) -> list[str]:
    return [record["body"] for record in store.records(limit=100_000)]


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SERVERS))
def test_requests_are_acknowledged_in_batches_and_all_stored(ferretdb, framework: str) -> None:
    bodies = [f"batched-{i}" for i in range(REQUESTS)]
    database = f"gc_{framework}".replace("-", "_")
    with proxied_sink(ferretdb, framework, database, delay_s=0.02) as (server, store, proxy):
        statuses = post_concurrently(server.url, bodies)
        assert statuses == [200] * REQUESTS
        sizes = proxy.forwarded_sizes()
        audit = store.audit()
        stored = stored_bodies(store)
    assert sum(sizes) == REQUESTS, sizes
    assert max(sizes) <= contract.MONGO_BATCH_MAX_RECORDS, sizes
    assert max(sizes) > 1, sizes  # records that waited went out together
    assert sorted(stored) == sorted(bodies)
    assert audit is not None and (audit.records, audit.duplicates) == (REQUESTS, 0)


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SERVERS))
def test_mongo_batch_one_inserts_each_record_alone(ferretdb, framework: str) -> None:
    require_framework(framework)
    database = f"one_{framework}".replace("-", "_")
    proxy = RecordingProxy(ferretdb.port, delay_s=0.02)
    bodies = [f"single-{i}" for i in range(REQUESTS // 2)]
    try:
        with SinkStore("mongo", mongo_url=ferretdb.url, mongo_db=database, mongo_batch=1) as store:
            args = [*store.server_args(), "--mongo-url", proxy.url]  # the last one counts
            assert args[args.index("--mongo-batch") + 1] == "1"
            with start_server(framework, sink="mongo", extra_args=args) as server:
                assert post_concurrently(server.url, bodies) == [200] * len(bodies)
            assert set(proxy.forwarded_sizes()) == {1}
            assert sorted(stored_bodies(store)) == sorted(bodies)
    finally:
        proxy.close()


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SERVERS))
def test_a_failed_batch_answers_503_to_each_of_its_requests(ferretdb, framework: str) -> None:
    """The proxy cuts the connection carrying a batch (the first of several records after
    the first insert): each of its requests is answered 503, nothing answered 200 is
    missing, nothing answered 503 was stored."""
    bodies = [f"cut-{i}" for i in range(REQUESTS)]
    database = f"cut_{framework}".replace("-", "_")
    proxy_options = {"delay_s": 0.02, "cut_after": 1}
    with proxied_sink(ferretdb, framework, database, **proxy_options) as (server, store, proxy):
        statuses = post_concurrently(server.url, bodies)
        assert server.wait_telemetry(lambda t: t["sink_errors"] >= 1 and t["backlog"] == 0)
        assert httpx.get(server.url + contract.ROUTE_TEXT, timeout=5).status_code == 200
        stored = set(stored_bodies(store))
    assert proxy.cut is not None, proxy.forwarded_sizes()
    answered = dict(zip(bodies, statuses, strict=True))
    assert {answered[str(document["body"])] for document in proxy.cut} == {503}
    assert set(statuses) <= {200, 503}
    assert {body for body, status in answered.items() if status == 200} <= stored
    assert not {body for body, status in answered.items() if status == 503} & stored


# the servers' mongo write deadline here (--write-timeout-s), shorter than the contract's
# sinks.MONGO_WRITE_TIMEOUT_MS (10 s), whose wait made this test ~21 s per server
WRITE_TIMEOUT_S = 2.0
# ~5 s each (two deadlines): the Python runtimes' deadline is one client option
# (sinks.records_collection), so the default run takes one synchronous pymongo (gevent)
# and one asynchronous (aiohttp) beside Node's timer; the others in the slow run
DEADLINE_SHARED = {"tornado": "aiohttp", "twisted": "gevent"}


@pytest.mark.parametrize(
    "framework",
    [
        pytest.param(name, marks=pytest.mark.slow)
        if name in DEADLINE_SHARED or SHARED_RUNTIME.get(name) in MONGO_SERVERS
        else name
        for name in MONGO_SERVERS
    ],
)
def test_a_batch_the_database_never_answers_fails_at_the_write_deadline(
    ferretdb, framework: str
) -> None:
    """The database stops answering inserts (their connection stays open): each batch sent
    after that fails at the write deadline (--write-timeout-s WRITE_TIMEOUT_S here), its
    requests answered 503, instead of holding every later /log for good (Node's driver was
    seen to leave an insert unsettled: sinks.MONGO_WRITE_TIMEOUT_MS)."""
    bodies = [f"stall-{i}" for i in range(41)]
    database = f"stall_{framework}".replace("-", "_")
    args = ["--write-timeout-s", str(WRITE_TIMEOUT_S)]
    with proxied_sink(ferretdb, framework, database, args, stall_after=1) as (server, store, proxy):
        assert post_concurrently(server.url, bodies[:1]) == [200]  # the one insert forwarded
        started = time.monotonic()
        statuses = post_concurrently(server.url, bodies[1:])
        elapsed_s = time.monotonic() - started
        assert server.wait_telemetry(lambda t: t["sink_errors"] >= 1 and t["backlog"] == 0)
        stored = set(stored_bodies(store))
    deadline_s = WRITE_TIMEOUT_S
    assert set(statuses) == {503}, collections.Counter(statuses)
    # one batch in flight at a time, each failing at its deadline, not later
    swallowed = len(proxy.inserts) - 1
    assert swallowed >= 1 and stored == {bodies[0]}
    assert deadline_s <= elapsed_s < swallowed * deadline_s + 5, (elapsed_s, swallowed)


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SERVERS))
def test_a_database_killed_mid_load_loses_no_acknowledged_record(
    framework: str, tmp_path: Path
) -> None:
    """FerretDB is SIGKILLed after the first replies and restarted on its port a second
    after the servers' server-selection timeout: requests meanwhile answer 503 (a driver
    gives up on a write after that timeout, so a shorter outage may be ridden out by
    retries), those after it 200, and every 200 is stored once."""
    require_framework(framework)
    require_ferretdb()
    data_dir = tmp_path / "db"
    database = FerretDB(data_dir)
    restarted: FerretDB | None = None
    total, threads, deadline = 600, 20, time.monotonic() + 60
    statuses: dict[str, int] = {}
    failures: list[str] = []  # each request that got no answer: what and when (the message)
    lock = threading.Lock()
    started = time.monotonic()

    def client(worker: int) -> None:
        with httpx.Client(base_url=server.url, timeout=15) as http:
            for i in range(worker, total, threads):
                if time.monotonic() > deadline:
                    return
                body = f"kill-{i}"
                sent = time.monotonic()
                try:
                    status = http.post(contract.ROUTE_LOG, content=body).status_code
                except httpx.HTTPError as error:
                    status = 0
                    failures.append(
                        f"{body}: {type(error).__name__} sent at {sent - started:.1f} s, "
                        f"after {time.monotonic() - sent:.1f} s"
                    )
                with lock:
                    statuses[body] = status

    try:
        with SinkStore("mongo", mongo_url=database.url) as store:
            with start_server(framework, sink="mongo", extra_args=store.server_args()) as server:
                with ThreadPoolExecutor(threads) as pool:
                    loads = [pool.submit(client, worker) for worker in range(threads)]
                    while len(statuses) < 100 and time.monotonic() < deadline:
                        time.sleep(0.01)
                    os.killpg(database.process.pid, signal.SIGKILL)
                    database.process.wait()
                    killed_s = time.monotonic() - started
                    time.sleep(MONGO_SERVER_SELECTION_TIMEOUT_MS / 1000 + 1)
                    restarted = FerretDB(data_dir, port=database.port)
                    back_s = time.monotonic() - started
                    for load in loads:
                        load.result()
                assert server.stop() == 0, server.stderr_tail()
            values = list(statuses.values())
            said = (
                f"{collections.Counter(values)}; killed at {killed_s:.1f} s, back at "
                f"{back_s:.1f} s; {failures[:5]}; server: {server.stderr_tail()}"
            )
            assert values.count(503) > 0 and set(values) <= {200, 503}, said
            acknowledged = {body for body, status in statuses.items() if status == 200}
            audit = store.audit()
            stored = stored_bodies(store)
        assert acknowledged <= set(stored)  # lost 0
        assert audit is not None and audit.duplicates == 0
        assert len(acknowledged) > 100  # served again after the restart
    finally:
        database.stop()
        if restarted is not None:
            restarted.stop()


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SERVERS))
def test_a_write_timeout_out_of_range_is_one_usage_line(framework: str) -> None:
    """`--write-timeout-s` only shortens the contract's 10 s: 11 ends each runtime's server
    with one line naming the option, exit status 2, before it listens."""
    require_framework(framework)
    result = subprocess.run(
        [sys.executable, "-m", "servers", framework, "--sink", "mongo", "--port", "0",
         "--write-timeout-s", "11"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "must be in" in line]
    assert len(errors) == 1, result.stderr
    assert "write" in errors[0] and "must be in (0, 10], not 11" in errors[0], errors

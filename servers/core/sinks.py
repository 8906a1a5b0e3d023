"""Sinks: where `/log` records and `/ws` messages go — the framework-neutral parts.

Every framework writes its sink in its own idiom (asyncio executors and pymongo's async
client under aiohttp/tornado, green threads under gevent/eventlet, Twisted's thread pool);
what must be identical is here: the record's bytes, the file's batching, the database and
collection names, and which errors make `/log` answer 503.

- `empty`: counts and drops.
- `file`: one JSON line per record appended to `--sink-path`, batched, written at least
  every 100 ms and on shutdown; `/log` answers once its record was handed to the OS
  (with `--durable`, once it was also fsync'ed). A write that fails part-way (a full
  disk) is cut back to the last whole record, so the file only ever holds whole lines.
- `mongo`: one document per record in `<--mongo-db>.records` (default `harness.records`),
  write concern `--mongo-w` (with `--durable`, journaled: `j: true`), inserted by group
  commit (`GroupCommit`): the records waiting go out together in one ordered
  `insert_many` as soon as the previous batch returned, or at once when
  `--mongo-batch` (contract.MONGO_BATCH_MAX_RECORDS) of them wait; `/log` answers once
  its batch was acknowledged, 503 when its batch failed.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from servers.contract import WS_SINK_MAX_PENDING, ServerOptions
from servers.core.state import ServerState

FLUSH_INTERVAL_S = 0.100
MONGO_DATABASE = "harness"
MONGO_COLLECTION = "records"
MONGO_SERVER_SELECTION_TIMEOUT_MS = 2000
# Shutdown waits this long for the sink's writes and inserts in flight (the contract's
# SHUTDOWN_GRACE_S leaves room for it after the connections' grace).
CLOSE_TIMEOUT_S = 2.0
DEFAULT_MONGO_URL = "mongodb://127.0.0.1:27017/"


class SinkUnavailable(Exception):
    """The sink cannot take the record now (database down): `/log` answers 503."""


class Sink(Protocol):
    """What a framework's sink offers (its `store_and_wait` is async, green or a Deferred)."""

    def store(self, record: dict[str, Any]) -> bool:
        """Take a WebSocket message's record without waiting; False when the sink's queue
        is full (contract.WS_SINK_MAX_PENDING): the connection then closes with 1013."""
        ...

    def close(self) -> None: ...


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one JSON line: the file sink's format, identical on every framework."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class FileBatch:
    """Records waiting for the file, and the blocking write a worker thread performs.

    Frameworks call `add` on their loop, then hand `take()` to a worker thread that calls
    `write`: the loop never blocks on the disk.
    """

    def __init__(self, path: str, durable: bool = False) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.durable = durable
        self._lines: list[bytes] = []
        self._broken: str | None = None  # a torn write could not be cut back: refuse more

    def add(self, record: dict[str, Any]) -> None:
        self._lines.append(encode_record(record))

    def __len__(self) -> int:
        return len(self._lines)

    def take(self) -> tuple[bytes, int]:
        """The pending bytes and how many records they hold; the batch is empty after."""
        lines, self._lines = self._lines, []
        return b"".join(lines), len(lines)

    def write(self, data: bytes) -> None:
        """Hand every byte to the OS (runs on a worker thread), or none of them.

        A write that fails part-way (ENOSPC, EFBIG) would leave a torn line the next
        batch is glued to: the file is cut back to where this batch began, so a failed
        batch (answered 503) leaves nothing and the next one starts a line. The workers of
        `--workers N` append to one file: an exclusive `flock` around the write makes
        "where this batch began" exact. With `durable`, the batch is fsync'ed before it
        counts as written.
        """
        if self._broken is not None:
            raise OSError(f"file sink unusable after a torn write: {self._broken}")
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            start = os.fstat(self.fd).st_size
            try:
                view = memoryview(data)
                while view:
                    written = os.write(self.fd, view)
                    view = view[written:]
                if self.durable:
                    os.fsync(self.fd)
            except OSError:
                self._cut_back(start)
                raise
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _cut_back(self, start: int) -> None:
        try:
            os.ftruncate(self.fd, start)
        except OSError as error:  # the torn line stays: every later batch must fail
            self._broken = str(error)

    def close(self) -> None:
        os.close(self.fd)


def records_collection(
    client_class: Any, url: str, w: int, database: str, durable: bool = False
) -> tuple[Any, Any]:
    """A pymongo client of `client_class` (sync or async) for the mongo sink, and its
    `<database>.records` collection with write concern `w` (journaled when `durable`): no
    I/O until the first insert."""
    from pymongo.write_concern import WriteConcern

    concern = WriteConcern(w=w, j=True) if durable else WriteConcern(w=w)
    client = client_class(url, serverSelectionTimeoutMS=MONGO_SERVER_SELECTION_TIMEOUT_MS, w=w)
    collection = client[database].get_collection(MONGO_COLLECTION, write_concern=concern)
    return client, collection


WaiterT = TypeVar("WaiterT")


@dataclass(frozen=True, slots=True)
class MongoBatch(Generic[WaiterT]):
    """One `insert_many`: its documents, in arrival order, and who waits for its answer."""

    documents: list[dict[str, Any]]
    waiters: list[WaiterT]  # the /log requests' (a WebSocket message has none)
    messages: int  # WebSocket messages among the documents


class GroupCommit(Generic[WaiterT]):
    """The mongo sink's group commit, sans I/O: which records go out together, and when.

    The rule, the same on every runtime: records wait in arrival order; a batch of at most
    `max_records` of them is due when no batch of this sink is in flight (the previous one
    returned), or at once when `max_records` wait, so under load several full batches may
    be in flight while a partial one waits for them. A runtime takes records (`take_*`),
    inserts each batch `next_batch` gives it with its own client, and `settle`s it; it
    sends what is due at once when a batch is `full`, otherwise on its loop's next turn,
    so the requests that arrived in one turn share a batch. With `max_records` 1 every
    record is its own insert, at once: the seed study's shape.

    A waiter is the runtime's own (a future, a green event, a Deferred, a callback): this
    class only hands the batch's waiters back. It keeps the counters `backlog` (taken, not
    yet settled), `stored` and `sink_errors` on `state`, and bounds the WebSocket messages
    waiting or in flight to contract.WS_SINK_MAX_PENDING.
    """

    def __init__(self, state: ServerState, max_records: int) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be at least 1, not {max_records}")
        self._state = state
        self.max_records = max_records
        # documents waiting, and their waiters (None: a WebSocket message)
        self._documents: list[dict[str, Any]] = []
        self._waiters: list[WaiterT | None] = []
        self.messages_pending = 0  # WebSocket messages waiting or in flight
        self.in_flight = 0  # batches handed out by next_batch, not settled yet
        self.closed = False

    def _take(self, record: dict[str, Any], waiter: WaiterT | None) -> None:
        if self.closed:  # after shutdown closed the client
            self._state.sink_errors += 1
            raise SinkUnavailable("the mongo sink is closed")
        # insert_many adds `_id` to the dicts it is given: a copy, not the caller's record
        self._documents.append(dict(record))
        self._waiters.append(waiter)
        self._state.backlog += 1

    def take_request(self, record: dict[str, Any], waiter: WaiterT) -> None:
        """A `/log` request's record; `waiter` is handed back with its batch. Raises
        SinkUnavailable (counted in sink_errors) once the sink is closed."""
        self._take(record, waiter)

    def take_message(self, record: dict[str, Any]) -> bool:
        """A WebSocket message's record; False, refused and counted in sink_errors, when
        WS_SINK_MAX_PENDING messages already wait or are in flight (the connection then
        closes with 1013). Once the sink is closed the record only counts in sink_errors."""
        if self.messages_pending >= WS_SINK_MAX_PENDING:
            self._state.sink_errors += 1
            return False
        try:
            self._take(record, None)
        except SinkUnavailable:
            return True  # after shutdown: counted; the connection is closing with 1001
        self.messages_pending += 1
        return True

    @property
    def waiting(self) -> int:
        """Records taken and not yet in a batch."""
        return len(self._documents)

    @property
    def idle(self) -> bool:
        """Nothing waits and nothing is in flight."""
        return not self._documents and not self.in_flight

    def full(self) -> bool:
        """A whole batch waits: send it now, without waiting for the loop's next turn."""
        return len(self._documents) >= self.max_records

    def due(self) -> bool:
        """A batch should go out now (or on the loop's next turn, when not `full`)."""
        return bool(self._documents) and (not self.in_flight or self.full())

    def next_batch(self) -> MongoBatch[WaiterT] | None:
        """The batch to insert now, in flight until `settle`d; None when none is due."""
        if not self.due():
            return None
        count = self.max_records
        documents, self._documents = self._documents[:count], self._documents[count:]
        waiters, self._waiters = self._waiters[:count], self._waiters[count:]
        requests = [waiter for waiter in waiters if waiter is not None]
        self.in_flight += 1
        return MongoBatch(documents, requests, len(waiters) - len(requests))

    def settle(self, batch: MongoBatch[WaiterT], stored: bool) -> list[WaiterT]:
        """`batch` was acknowledged (`stored`) or failed: count it, and return its waiters
        for the runtime to answer (success, or SinkUnavailable: 503)."""
        count = len(batch.documents)
        self.in_flight -= 1
        self.messages_pending -= batch.messages
        self._state.backlog -= count
        if stored:
            self._state.stored += count
        else:
            self._state.sink_errors += count
        return batch.waiters

    def close(self) -> None:
        """Refuse records from now on (shutdown, after the last batch was sent or given up)."""
        self.closed = True


SinkT = TypeVar("SinkT")


def open_sink(
    options: ServerOptions,
    *,
    empty: Callable[[], SinkT],
    file: Callable[[str], SinkT],
    mongo: Callable[[str, int, str], SinkT],
) -> SinkT:
    """The sink `options.sink` names, made by the runtime's own constructor for that kind:
    `file(path)`, `mongo(url, w, database)` or `empty()` (each reads the rest of `options`,
    `durable` and `mongo_batch`, itself)."""
    if options.sink == "file":
        return file(sink_path(options))
    if options.sink == "mongo":
        return mongo(mongo_url(options), options.mongo_w, options.mongo_db)
    return empty()


def sink_path(options: ServerOptions) -> str:
    if not options.sink_path:
        raise SystemExit("servers: --sink file needs --sink-path FILE")
    return options.sink_path


def mongo_url(options: ServerOptions) -> str:
    return options.mongo_url or DEFAULT_MONGO_URL

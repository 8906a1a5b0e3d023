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
  write concern `--mongo-w` (with `--durable`, journaled: `j: true`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from servers.contract import ServerOptions

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


SinkT = TypeVar("SinkT")


def open_sink(
    options: ServerOptions,
    *,
    empty: Callable[[], SinkT],
    file: Callable[[str], SinkT],
    mongo: Callable[[str, int, str], SinkT],
) -> SinkT:
    """The sink `options.sink` names, made by the runtime's own constructor for that kind:
    `file(path)`, `mongo(url, w, database)` or `empty()`."""
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

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

Each runtime (servers/runtimes/*/sinks.py) does the I/O in its own way — how a file is
written off the loop, which client inserts, how a callback is put on the loop's next turn,
what a waiting request waits on. The rules are here, once, sans I/O: the record's bytes
(`encode_record`), what goes out together and when (`FileCommit`, `GroupCommit`), the
counters `backlog`, `stored` and `sink_errors`, which requests an outcome answers, and the
answer a failure becomes (`failure_answer`).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from servers.contract import MONGO_WRITE_TIMEOUT_S, WS_SINK_MAX_PENDING, ServerOptions
from servers.core.state import ServerState

FLUSH_INTERVAL_S = 0.100
MONGO_DATABASE = "harness"
MONGO_COLLECTION = "records"
MONGO_SERVER_SELECTION_TIMEOUT_MS = 2000
# A batch the database has not answered this long after it went out fails (503), on every
# runtime: Node's driver (6.22) left an insert pending for good after the database was
# SIGKILLed mid-load, 1 run in 8 with the CPUs busy, and every later /log queued behind
# it. pymongo bounds it with `socketTimeoutMS` (a timed-out write is not retried: one
# deadline per batch), not `timeoutMS`: under that, a write to a database that is down is
# retried until the whole 10 s run out, where it should fail at server selection (2 s);
# Node's runtime with a timer of its own. `--write-timeout-s` shortens it (tests).
MONGO_WRITE_TIMEOUT_MS = int(MONGO_WRITE_TIMEOUT_S * 1000)
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


WaiterT = TypeVar("WaiterT")


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


# Exception classes whose failures are the disk's or the database's, not ours.
Outages = tuple[type[BaseException], ...]
# A file write's: a full disk (ENOSPC, EFBIG), EIO.
FILE_OUTAGES: Outages = (OSError,)


def mongo_outages() -> Outages:
    """An insert's: pymongo's errors, every one of which means the database failed,
    refused or could not be reached in time."""
    from pymongo.errors import PyMongoError

    return (PyMongoError,)


def failure_answer(error: BaseException, outages: Outages) -> Exception:
    """What a request whose write or insert raised `error` raises in turn.

    SinkUnavailable (`/log` answers 503) when `error` is one of the sink's `outages`
    (`FILE_OUTAGES`, `mongo_outages()`); RuntimeError (a bug: 500) for anything else. A
    new exception each call, one for each request: one exception raised in many tasks
    would grow its traceback on every raise.
    """
    if isinstance(error, outages):
        return SinkUnavailable(str(error))
    return RuntimeError(f"sink failed: {error!r}")


class _Answers:
    """What a commit's failures mean: the part of the error mapping a runtime asks for."""

    outages: Outages

    def answer(self, error: BaseException) -> Exception:
        """A request's answer to `error` (`failure_answer`): SinkUnavailable or RuntimeError."""
        return failure_answer(error, self.outages)

    def is_bug(self, error: BaseException) -> bool:
        """`error` is none of the sink's outages: the runtime logs it (its requests get 500)."""
        return not isinstance(error, self.outages)


@dataclass(frozen=True, slots=True)
class FileWrite(Generic[WaiterT]):
    """One write of the file sink: its bytes, the records they hold, who waits for it."""

    data: bytes
    records: int
    waiters: list[WaiterT]  # the /log requests' (a WebSocket message has none)


class FileCommit(_Answers, Generic[WaiterT]):
    """The file sink's bookkeeping, sans I/O: what each write carries, and the counters.

    The rule, the same on every runtime: records gather in a `FileBatch`; one write is in
    flight at a time, so the lines stay in order; a write carries every record waiting
    when it starts. A WebSocket message's record waits at most FLUSH_INTERVAL_S for a
    write; a `/log` request's makes one start on the loop's next turn, so the requests
    that arrive in one turn share it, and is answered once that write was settled. A
    runtime asks `start_write` before each write (False while one is in flight: it then
    asks again once that one was settled, `again`), takes it (`take_write`), hands its
    bytes to `batch.write` off its loop, and `settle`s it.

    A waiter is the runtime's own (a future, a green event, a Deferred): this class only
    hands a write's waiters back, and says what a failed write answers (`answer`). It
    keeps the counters `backlog` (taken, not yet settled), `stored` and `sink_errors` on
    `state`.
    """

    outages = FILE_OUTAGES

    def __init__(self, state: ServerState, options: ServerOptions) -> None:
        """Open `--sink-path` for appending (`--durable`: fsync'ed by every write)."""
        self._state = state
        self.batch = FileBatch(sink_path(options), options.durable)
        self._waiters: list[WaiterT] = []
        self.writing = False  # a write started and is not settled yet
        self._again = False  # a write was asked for while one was in flight
        self.closed = False

    def take_message(self, record: dict[str, Any]) -> None:
        """A WebSocket message's record. Once the sink is closed it only counts in
        sink_errors: the connection is being closed with 1001 anyway."""
        if self.closed:
            self._state.sink_errors += 1
            return
        self.batch.add(record)
        self._state.backlog += 1

    def take_request(self, record: dict[str, Any], waiter: WaiterT) -> None:
        """A `/log` request's record; `waiter` is handed back with its write (once, when
        the requests of one write share it). Raises SinkUnavailable (counted in
        sink_errors) once the sink is closed."""
        if self.closed:
            self._state.sink_errors += 1
            raise SinkUnavailable("the file sink is closed")
        self.batch.add(record)
        self._state.backlog += 1
        # The green runtime shares one waiter among a write's requests (one green event
        # wakes them all): it is answered once.
        if not self._waiters or self._waiters[-1] is not waiter:
            self._waiters.append(waiter)

    @property
    def pending(self) -> bool:
        """Records wait for a write."""
        return len(self.batch) > 0

    def start_write(self) -> bool:
        """Whether a write starts now; False while one is in flight, and `again` then
        says True once it was settled."""
        if self.writing:
            self._again = True
            return False
        self.writing = True
        return True

    def take_write(self) -> FileWrite[WaiterT]:
        """The write `start_write` began: every record waiting (perhaps none) and the
        requests waiting for them; they wait no more."""
        data, records = self.batch.take()
        waiters, self._waiters = self._waiters, []
        return FileWrite(data, records, waiters)

    def settle(self, write: FileWrite[WaiterT], error: BaseException | None) -> list[WaiterT]:
        """`write` ended: stored, or failed with `error`. Count it, and return its waiters
        for the runtime to answer (success, or `answer(error)`)."""
        self.writing = False
        self._state.backlog -= write.records
        if error is None:
            self._state.stored += write.records
        else:
            self._state.sink_errors += write.records
        return write.waiters

    def again(self) -> bool:
        """A write was asked for while the one just settled was in flight: it starts now
        (as `start_write` True)."""
        again, self._again = self._again, False
        return again and self.start_write()

    def close(self) -> None:
        """Refuse records from now on (shutdown, after the last write or when it is stuck;
        the runtime then closes `batch` unless a write may still use it)."""
        self.closed = True


def write_timeout_ms(options: ServerOptions) -> float:
    """Milliseconds the mongo sink waits for a batch's answer: MONGO_WRITE_TIMEOUT_MS,
    or `--write-timeout-s`."""
    if options.write_timeout_s is None:
        return MONGO_WRITE_TIMEOUT_MS
    return options.write_timeout_s * 1000


def records_collection(client_class: Any, options: ServerOptions) -> tuple[Any, Any]:
    """A pymongo client of `client_class` (sync or async) for the mongo sink `options`
    ask for, and its `<--mongo-db>.records` collection with write concern `--mongo-w`
    (journaled with `--durable`): no I/O until the first insert, and no reply awaited past
    its write deadline (`socketTimeoutMS`: the insert raises, its batch answers 503):
    MONGO_WRITE_TIMEOUT_MS, or `--write-timeout-s`."""
    from pymongo.write_concern import WriteConcern

    w = options.mongo_w
    concern = WriteConcern(w=w, j=True) if options.durable else WriteConcern(w=w)
    client = client_class(
        mongo_url(options),
        serverSelectionTimeoutMS=MONGO_SERVER_SELECTION_TIMEOUT_MS,
        socketTimeoutMS=write_timeout_ms(options),
        w=w,
    )
    collection = client[options.mongo_db].get_collection(MONGO_COLLECTION, write_concern=concern)
    return client, collection


@dataclass(frozen=True, slots=True)
class MongoBatch(Generic[WaiterT]):
    """One `insert_many`: its documents, in arrival order, and who waits for its answer."""

    documents: list[dict[str, Any]]
    waiters: list[WaiterT]  # the /log requests' (a WebSocket message has none)
    messages: int  # WebSocket messages among the documents


class GroupCommit(_Answers, Generic[WaiterT]):
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
    class only hands the batch's waiters back, and says what a failed insert answers
    (`answer`: pymongo's errors 503, anything else 500). It keeps the counters `backlog` (taken, not
    yet settled), `stored` and `sink_errors` on `state`, and bounds the WebSocket messages
    waiting or in flight to contract.WS_SINK_MAX_PENDING.
    """

    def __init__(self, state: ServerState, max_records: int) -> None:
        if max_records < 1:
            raise ValueError(f"max_records must be at least 1, not {max_records}")
        self._state = state
        self.max_records = max_records
        self.outages = mongo_outages()
        # documents waiting, and their waiters (None: a WebSocket message)
        self._documents: list[dict[str, Any]] = []
        self._waiters: list[WaiterT | None] = []
        self.messages_pending = 0  # WebSocket messages waiting or in flight
        self.in_flight = 0  # batches handed out by next_batch, not settled yet
        self._on_idle: list[WaiterT] = []  # shutdown waiting for the last batch
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
        for the runtime to answer (success, or `answer(error)`)."""
        count = len(batch.documents)
        self.in_flight -= 1
        self.messages_pending -= batch.messages
        self._state.backlog -= count
        if stored:
            self._state.stored += count
        else:
            self._state.sink_errors += count
        return batch.waiters

    def when_idle(self, waiter: WaiterT) -> bool:
        """Hold `waiter` until nothing waits or is in flight (shutdown draining the sink):
        `idle_waiters` hands it back then. False, not held, when that is so already."""
        if self.idle:
            return False
        self._on_idle.append(waiter)
        return True

    def idle_waiters(self) -> list[WaiterT]:
        """The `when_idle` waiters to answer now (after a `settle`): all of them once
        nothing waits or is in flight, else none."""
        if not self.idle or not self._on_idle:
            return []
        waiters, self._on_idle = self._on_idle, []
        return waiters

    def close(self) -> None:
        """Refuse records from now on (shutdown, after the last batch was sent or given up)."""
        self.closed = True


class EmptySink:
    """Counts and drops: what every runtime's empty sink shares (it adds the waiting
    `store_and_wait` and `close` in its own idiom)."""

    def __init__(self, state: ServerState, *_: object) -> None:
        # Made as every kind is (`open_sink`); it needs neither the options nor the runtime.
        self._state = state

    def store(self, record: dict[str, Any]) -> bool:
        """Count the record as stored; never refuses."""
        self._state.stored += 1
        return True


SinkT = TypeVar("SinkT")


def open_sink(
    kinds: Mapping[str, Callable[..., SinkT]],
    options: ServerOptions,
    state: ServerState,
    *runtime: object,
) -> SinkT:
    """The sink `options.sink` names, of its runtime's class for that kind
    (`kinds[options.sink]`), made as every kind is: `Kind(state, options, *runtime)`, where
    `runtime` is what that runtime's sinks need besides (a GreenRuntime, a reactor)."""
    return kinds[options.sink](state, options, *runtime)


def sink_path(options: ServerOptions) -> str:
    """`--sink-path`, which the file sink needs."""
    if not options.sink_path:
        raise SystemExit("servers: --sink file needs --sink-path FILE")
    return options.sink_path


def mongo_url(options: ServerOptions) -> str:
    """`--mongo-url`, or the local default."""
    return options.mongo_url or DEFAULT_MONGO_URL

"""Sinks on asyncio (aiohttp, tornado): file writes on one worker thread, pymongo's async client.

The loop never blocks: the file's `write()` runs on a single-thread executor (one thread
keeps the lines in order), and MongoDB inserts use `pymongo.AsyncMongoClient`, one task per
group-commit batch, a future per waiting `/log` request. What is written together and when,
the counters and what a failure answers are servers.core.sinks' (`FileCommit`,
`GroupCommit`); this module only does the I/O and the loop's scheduling.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from servers.contract import ServerOptions
from servers.core import sinks
from servers.core.state import ServerState


class AsyncEmptySink(sinks.EmptySink):
    """Counts and drops."""

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        self._state.stored += 1

    async def aclose(self) -> None:
        return None


def _resolve(
    waiters: list[asyncio.Future[None]],
    error: BaseException | None,
    answer: Callable[[BaseException], Exception],
) -> None:
    """Resolve `waiters`: stored (`error` None), or failed with `answer(error)`."""
    for waiter in waiters:
        if waiter.done():  # a request whose handler was cancelled
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(answer(error))


class AsyncFileSink:
    """Batched JSON lines (`FileCommit`): `/log` waits for its batch's write; messages wait
    ≤ 100 ms."""

    def __init__(self, state: ServerState, options: ServerOptions) -> None:
        self._commit: sinks.FileCommit[asyncio.Future[None]] = sinks.FileCommit(state, options)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="file-sink")
        self._flush_handle: asyncio.Handle | None = None
        self._writing: asyncio.Task[None] | None = None

    def store(self, record: dict[str, Any]) -> bool:
        self._commit.take_message(record)
        if self._flush_handle is None and self._commit.pending:
            loop = asyncio.get_running_loop()
            self._flush_handle = loop.call_later(sinks.FLUSH_INTERVAL_S, self._flush)
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._commit.take_request(record, waiter)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        # Next loop iteration: every /log request that arrived meanwhile shares one write.
        self._flush_handle = loop.call_soon(self._flush)
        await waiter

    def _flush(self) -> None:
        self._flush_handle = None
        if self._commit.start_write():  # else it starts again when the one in flight ends
            self._writing = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        # The task's first step runs on the loop's next turn: the records that arrive
        # until then go in this write too.
        write = self._commit.take_write()
        error: BaseException | None = None
        if write.records:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self._commit.batch.write, write.data)
            except Exception as failure:  # the disk's (503), or a bug (500)
                error = failure
        _resolve(self._commit.settle(write, error), error, self._commit.answer)
        if self._commit.again():
            self._writing = asyncio.get_running_loop().create_task(self._write())

    async def aclose(self) -> None:
        """Write everything taken (after the write in flight), then close the file."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        # Until nothing is written or waits: a write's end may start the next one, and
        # records may still arrive while one is in flight.
        while True:
            if self._writing is not None and not self._writing.done():
                await asyncio.wait([self._writing])
            elif self._commit.pending and self._commit.start_write():
                await self._write()
            else:  # nothing waits (or a write was cancelled: nothing more can be written)
                break
        self._commit.close()
        self._executor.shutdown(wait=True)
        self._commit.batch.close()


class AsyncMongoSink:
    """Group commit (`GroupCommit`) through pymongo's asyncio client: a task per batch,
    a future per `/log` request, resolved when its batch was acknowledged."""

    def __init__(self, state: ServerState, options: ServerOptions) -> None:
        from pymongo import AsyncMongoClient

        self._client, self._collection = sinks.records_collection(AsyncMongoClient, options)
        self._commit: sinks.GroupCommit[asyncio.Future[None]] = sinks.GroupCommit(
            state, options.mongo_batch
        )
        self._flush_handle: asyncio.Handle | None = None
        self._inserting: set[asyncio.Task[None]] = set()

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if not self._commit.take_message(record):
            return False
        self._schedule()
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit.take_request(record, waiter)
        self._schedule()
        await waiter

    def _schedule(self) -> None:
        """A full batch goes now; otherwise what is due goes on the loop's next turn, so
        every request that arrives in this turn shares the batch."""
        if self._commit.full():
            self._send_due()
        elif self._flush_handle is None and self._commit.due():
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        self._send_due()

    def _send_due(self) -> None:
        loop = asyncio.get_running_loop()
        while (batch := self._commit.next_batch()) is not None:
            task = loop.create_task(self._insert(batch))
            self._inserting.add(task)
            task.add_done_callback(self._inserting.discard)

    async def _insert(self, batch: sinks.MongoBatch[asyncio.Future[None]]) -> None:
        error: BaseException | None = None
        try:
            await self._collection.insert_many(batch.documents, ordered=True)
        except Exception as failure:  # the database's (503), or a bug (500)
            error = failure
        commit = self._commit
        _resolve(commit.settle(batch, stored=error is None), error, commit.answer)
        self._send_due()  # the records that waited for this batch go now
        _resolve(commit.idle_waiters(), None, commit.answer)

    async def aclose(self) -> None:
        """Insert everything taken (within CLOSE_TIMEOUT_S), then close the client."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._send_due()
        idle: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._commit.when_idle(idle):
            await asyncio.wait([idle], timeout=sinks.CLOSE_TIMEOUT_S)
        self._commit.close()
        await self._client.close()


AsyncSink = AsyncEmptySink | AsyncFileSink | AsyncMongoSink


def open_async_sink(options: ServerOptions, state: ServerState) -> AsyncSink:
    """The asyncio sink `options` ask for."""
    kinds = {"empty": AsyncEmptySink, "file": AsyncFileSink, "mongo": AsyncMongoSink}
    return sinks.open_sink(kinds, options, state)

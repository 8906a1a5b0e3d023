"""Sinks on asyncio (aiohttp, tornado): file writes on one worker thread, pymongo's async client.

The loop never blocks: the file's `write()` runs on a single-thread executor (one thread
keeps the lines in order), and MongoDB inserts use `pymongo.AsyncMongoClient`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from servers.contract import WS_SINK_MAX_PENDING, ServerOptions
from servers.core.sinks import (
    FLUSH_INTERVAL_S,
    FileBatch,
    SinkUnavailable,
    open_sink,
    records_collection,
)
from servers.core.state import ServerState


class AsyncEmptySink:
    """Counts and drops."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def store(self, record: dict[str, Any]) -> bool:
        self._state.stored += 1
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        self._state.stored += 1

    async def aclose(self) -> None:
        return None


class AsyncFileSink:
    """Batched JSON lines: `/log` waits for its batch's write; messages wait ≤ 100 ms."""

    def __init__(self, state: ServerState, path: str, durable: bool = False) -> None:
        self._state = state
        self._batch = FileBatch(path, durable)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="file-sink")
        self._waiters: list[asyncio.Future[None]] = []
        self._flush_handle: asyncio.Handle | None = None
        self._flushing: asyncio.Task[None] | None = None

    def store(self, record: dict[str, Any]) -> bool:
        self._batch.add(record)
        self._state.backlog += 1
        if self._flush_handle is None:
            loop = asyncio.get_running_loop()
            self._flush_handle = loop.call_later(FLUSH_INTERVAL_S, self._start_flush)
        return True

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        self._batch.add(record)
        self._state.backlog += 1
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        if self._flush_handle is not None:
            self._flush_handle.cancel()
        # Next loop iteration: every /log request that arrived meanwhile shares one write.
        self._flush_handle = loop.call_soon(self._start_flush)
        await waiter

    def _start_flush(self) -> None:
        self._flush_handle = None
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.get_running_loop().create_task(self._flush())
        else:  # a write is under way: go again when it ends
            self._flushing.add_done_callback(lambda _: self._start_flush())

    async def _flush(self) -> None:
        data, count = self._batch.take()
        waiters, self._waiters = self._waiters, []
        if count:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(self._executor, self._batch.write, data)
            except OSError as error:
                self._state.sink_errors += count
                self._state.backlog -= count
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(SinkUnavailable(str(error)))
                return
            self._state.stored += count
            self._state.backlog -= count
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def aclose(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._flushing is not None:
            await asyncio.wait([self._flushing])
        await self._flush()
        self._executor.shutdown(wait=True)
        self._batch.close()


class AsyncMongoSink:
    """One document per record through pymongo's asyncio client."""

    def __init__(
        self, state: ServerState, url: str, w: int, database: str, durable: bool = False
    ) -> None:
        from pymongo import AsyncMongoClient

        self._state = state
        self._client, self._collection = records_collection(
            AsyncMongoClient, url, w, database, durable
        )
        self._pending: set[asyncio.Task[None]] = set()

    async def _insert(self, record: dict[str, Any]) -> None:
        from pymongo.errors import PyMongoError

        self._state.backlog += 1
        try:
            # insert_one adds _id to the dict it is given: hand it a copy
            await self._collection.insert_one(dict(record))
        except PyMongoError as error:
            self._state.sink_errors += 1
            raise SinkUnavailable(str(error)) from error
        finally:
            self._state.backlog -= 1
        self._state.stored += 1

    def store(self, record: dict[str, Any]) -> bool:
        """False, the record refused and counted in sink_errors, when WS_SINK_MAX_PENDING
        messages already wait for their inserts."""
        if len(self._pending) >= WS_SINK_MAX_PENDING:
            self._state.sink_errors += 1
            return False
        task = asyncio.get_running_loop().create_task(self._insert(record))
        self._pending.add(task)
        task.add_done_callback(self._done)
        return True

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pending.discard(task)
        if not task.cancelled():
            task.exception()  # counted in sink_errors already; do not log it as unretrieved

    async def store_and_wait(self, record: dict[str, Any]) -> None:
        await self._insert(record)

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.wait(self._pending, timeout=2.0)
        await self._client.close()


AsyncSink = AsyncEmptySink | AsyncFileSink | AsyncMongoSink


def open_async_sink(options: ServerOptions, state: ServerState) -> AsyncSink:
    """The asyncio sink `options` ask for."""
    return open_sink(
        options,
        empty=lambda: AsyncEmptySink(state),
        file=lambda path: AsyncFileSink(state, path, durable=options.durable),
        mongo=lambda url, w, database: AsyncMongoSink(
            state, url, w, database, durable=options.durable
        ),
    )

"""The file sink's rules without a server (servers.core.sinks.FileCommit): what a write
carries, one write at a time, what is counted, what a failure answers; and the asyncio file
sink driving them in-process."""

from __future__ import annotations

import asyncio
import errno
import json
from pathlib import Path

import pytest

from servers.contract import ServerOptions
from servers.core.sinks import (
    FileCommit,
    GroupCommit,
    SinkUnavailable,
    failure_answer,
    mongo_outages,
    open_sink,
)
from servers.core.state import ServerState
from servers.runtimes.asyncio.sinks import AsyncFileSink, open_async_sink


def record(state: ServerState, body: str) -> dict[str, object]:
    return state.make_record("POST", "/log", {}, body)


def message(state: ServerState, body: str) -> dict[str, object]:
    return state.make_record("WS", "/ws", {}, body)


def file_options(path: Path) -> ServerOptions:
    return ServerOptions("aiohttp", sink="file", sink_path=str(path))


def test_a_write_carries_every_record_waiting_and_hands_back_its_requests(
    tmp_path: Path,
) -> None:
    state = ServerState("test", "none")
    commit: FileCommit[str] = FileCommit(state, file_options(tmp_path / "records.jsonl"))
    commit.take_request(record(state, "a"), "wait-a")
    commit.take_message(message(state, "m"))
    commit.take_request(record(state, "b"), "wait-b")
    assert commit.pending and state.backlog == 3
    assert commit.start_write()
    write = commit.take_write()
    assert write.records == 3 and write.waiters == ["wait-a", "wait-b"]
    assert [json.loads(line)["body"] for line in write.data.splitlines()] == ["a", "m", "b"]
    assert not commit.pending
    assert commit.settle(write, None) == ["wait-a", "wait-b"]
    assert (state.stored, state.backlog, state.sink_errors) == (3, 0, 0)
    commit.batch.close()


def test_one_write_at_a_time_and_the_one_asked_for_meanwhile_goes_next(tmp_path: Path) -> None:
    state = ServerState("test", "none")
    commit: FileCommit[int] = FileCommit(state, file_options(tmp_path / "records.jsonl"))
    commit.take_request(record(state, "0"), 0)
    assert commit.start_write()
    first = commit.take_write()
    commit.take_request(record(state, "1"), 1)
    assert not commit.start_write()  # the first is in flight: the lines stay in order
    commit.settle(first, None)
    assert commit.again()  # asked for meanwhile: it starts now
    second = commit.take_write()
    assert second.waiters == [1]
    commit.settle(second, None)
    assert not commit.again()  # nobody asked: the next waits for its timer or request
    commit.batch.close()


def test_a_failed_write_counts_its_records_and_answers_503_or_500(tmp_path: Path) -> None:
    state = ServerState("test", "none")
    commit: FileCommit[str] = FileCommit(state, file_options(tmp_path / "records.jsonl"))
    commit.take_request(record(state, "a"), "a")
    commit.take_message(message(state, "m"))
    assert commit.start_write()
    write = commit.take_write()
    full = OSError(errno.ENOSPC, "No space left on device")
    assert commit.settle(write, full) == ["a"]
    assert (state.stored, state.backlog, state.sink_errors) == (0, 0, 2)
    assert isinstance(commit.answer(full), SinkUnavailable) and not commit.is_bug(full)
    bug = ValueError("a bug")
    assert isinstance(commit.answer(bug), RuntimeError) and commit.is_bug(bug)
    assert commit.answer(full) is not commit.answer(full)  # one each: tracebacks stay short
    commit.batch.close()


def test_requests_sharing_one_waiter_get_it_back_once(tmp_path: Path) -> None:
    state = ServerState("test", "none")
    commit: FileCommit[str] = FileCommit(state, file_options(tmp_path / "records.jsonl"))
    for body in "abc":
        commit.take_request(record(state, body), "one event")
    assert commit.start_write()
    write = commit.take_write()
    assert write.records == 3 and write.waiters == ["one event"]
    commit.batch.close()


def test_a_closed_file_commit_refuses_and_counts(tmp_path: Path) -> None:
    state = ServerState("test", "none")
    commit: FileCommit[str] = FileCommit(state, file_options(tmp_path / "records.jsonl"))
    commit.close()
    with pytest.raises(SinkUnavailable):
        commit.take_request(record(state, "late"), "late")
    commit.take_message(message(state, "late"))
    assert state.sink_errors == 2 and state.backlog == 0 and not commit.pending
    commit.batch.close()


def test_database_errors_answer_503_and_others_500() -> None:
    from pymongo.errors import AutoReconnect

    down = AutoReconnect("connection refused")
    assert isinstance(failure_answer(down, mongo_outages()), SinkUnavailable)
    assert isinstance(failure_answer(KeyError("x"), mongo_outages()), RuntimeError)
    commit: GroupCommit[str] = GroupCommit(ServerState("test", "none"), max_records=10)
    assert not commit.is_bug(down) and str(commit.answer(down)) == "connection refused"


def test_shutdown_waits_for_the_last_batch() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[str] = GroupCommit(state, max_records=10)
    assert not commit.when_idle("shutdown")  # idle already: nothing to wait for
    commit.take_request(record(state, "a"), "a")
    batch = commit.next_batch()
    assert batch is not None and commit.when_idle("shutdown")
    assert commit.idle_waiters() == []  # in flight still
    commit.settle(batch, stored=True)
    assert commit.idle_waiters() == ["shutdown"] and commit.idle_waiters() == []


def test_open_sink_makes_the_kind_options_name(tmp_path: Path) -> None:
    kinds = {kind: lambda *made, kind=kind: (kind, made) for kind in ("empty", "file", "mongo")}
    state = ServerState("test", "none")
    options = file_options(tmp_path / "records.jsonl")
    assert open_sink(kinds, options, state, "runtime") == ("file", (state, options, "runtime"))
    with pytest.raises(SystemExit, match="--sink-path"):
        open_async_sink(ServerOptions("aiohttp", sink="file"), state)


def test_the_asyncio_file_sink_writes_whole_lines_and_refuses_after_closing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "records.jsonl"
    state = ServerState("test", "none")

    async def log_and_close() -> None:
        sink = AsyncFileSink(state, file_options(path))
        sink.store(message(state, "m"))
        await asyncio.gather(*(sink.store_and_wait(record(state, b)) for b in "abc"))
        await sink.aclose()
        with pytest.raises(SinkUnavailable):
            await sink.store_and_wait(record(state, "late"))

    asyncio.run(log_and_close())
    bodies = [json.loads(line)["body"] for line in path.read_text().splitlines()]
    assert sorted(bodies) == ["a", "b", "c", "m"]
    assert (state.stored, state.backlog, state.sink_errors) == (4, 0, 1)


def test_the_green_file_sink_writes_each_request_and_refuses_after_closing(tmp_path: Path) -> None:
    """The green sink on OS threads standing in for green ones (its rules, not its timing)."""
    import threading

    from servers.runtimes.green.sinks import GreenFileSink, GreenRuntime

    writes: list[bytes] = []

    def run_in_thread(function, *args):  # counts the writes, then does them
        writes.append(args[0])
        return function(*args)

    runtime = GreenRuntime(
        spawn=lambda function, *args: threading.Thread(
            target=function, args=args, daemon=True
        ).start(),
        event=threading.Event,
        run_in_thread=run_in_thread,
        queue=list,
        call_later=lambda seconds, function: lambda: None,
    )
    path = tmp_path / "records.jsonl"
    state = ServerState("test", "none")
    sink = GreenFileSink(state, file_options(path), runtime)
    requests = [
        threading.Thread(target=sink.store_and_wait, args=(record(state, str(i)),))
        for i in range(5)
    ]
    for request in requests:
        request.start()
    for request in requests:
        request.join(5)
    sink.close()
    with pytest.raises(SinkUnavailable):
        sink.store_and_wait(record(state, "late"))
    assert len(path.read_text().splitlines()) == 5 and 1 <= len(writes) <= 5
    assert (state.stored, state.backlog, state.sink_errors) == (5, 0, 1)

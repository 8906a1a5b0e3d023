"""The mongo sink's group commit without a database (servers.core.sinks.GroupCommit): which
records go out together and when, what is counted, and the WebSocket bound."""

from __future__ import annotations

import pytest

from servers.contract import MONGO_BATCH_MAX_RECORDS, WS_SINK_MAX_PENDING, ServerOptions
from servers.core.sinks import GroupCommit, SinkUnavailable, write_timeout_ms
from servers.core.state import ServerState


def record(state: ServerState, body: str) -> dict[str, object]:
    return state.make_record("POST", "/log", {}, body)


def test_the_first_record_is_due_alone_and_later_ones_wait_for_its_batch() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[str] = GroupCommit(state, max_records=100)
    commit.take_request(record(state, "a"), "wait-a")
    assert commit.due() and not commit.full()
    first = commit.next_batch()
    assert first is not None and first.waiters == ["wait-a"]
    for body in "bcd":
        commit.take_request(record(state, body), f"wait-{body}")
    assert not commit.due() and commit.next_batch() is None  # the first is in flight
    assert commit.settle(first, stored=True) == ["wait-a"]
    second = commit.next_batch()
    assert second is not None
    assert [document["body"] for document in second.documents] == ["b", "c", "d"]
    assert second.waiters == ["wait-b", "wait-c", "wait-d"]
    commit.settle(second, stored=True)
    assert commit.idle and (state.stored, state.backlog, state.sink_errors) == (4, 0, 0)


def test_a_full_batch_goes_while_another_is_in_flight_and_the_rest_waits() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[int] = GroupCommit(state, max_records=3)
    commit.take_request(record(state, "0"), 0)
    in_flight = commit.next_batch()
    assert in_flight is not None
    for i in range(1, 5):
        commit.take_request(record(state, str(i)), i)
    assert commit.full() and commit.due()
    full = commit.next_batch()
    assert full is not None and full.waiters == [1, 2, 3]
    assert commit.next_batch() is None  # one record waits: not full, batches in flight
    assert commit.waiting == 1 and commit.in_flight == 2
    commit.settle(full, stored=True)
    assert commit.next_batch() is None
    commit.settle(in_flight, stored=True)
    last = commit.next_batch()
    assert last is not None and last.waiters == [4]


def test_batch_one_sends_every_record_at_once() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[int] = GroupCommit(state, max_records=1)
    batches = []
    for i in range(3):
        commit.take_request(record(state, str(i)), i)
        assert commit.full()
        batch = commit.next_batch()
        assert batch is not None and len(batch.documents) == 1
        batches.append(batch)
    assert commit.in_flight == 3


def test_a_failed_batch_counts_each_record_and_hands_back_each_waiter() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[str] = GroupCommit(state, max_records=10)
    commit.take_request(record(state, "a"), "a")
    commit.take_message(state.make_record("WS", "/ws", {}, "m"))
    commit.take_request(record(state, "b"), "b")
    batch = commit.next_batch()
    assert batch is not None and batch.messages == 1
    assert commit.settle(batch, stored=False) == ["a", "b"]
    assert (state.stored, state.sink_errors, state.backlog) == (0, 3, 0)
    assert commit.messages_pending == 0


def test_documents_are_copies_with_the_records_ids() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[None] = GroupCommit(state, max_records=10)
    records = [record(state, str(i)) for i in range(5)]
    for taken in records:
        commit.take_message(taken)
    batch = commit.next_batch()
    assert batch is not None
    assert [document["id"] for document in batch.documents] == [r["id"] for r in records]
    batch.documents[0]["_id"] = "added by the driver"
    assert "_id" not in records[0]
    assert len({document["id"] for document in batch.documents}) == 5


def test_websocket_messages_are_bounded_while_waiting_or_in_flight() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[None] = GroupCommit(state, max_records=MONGO_BATCH_MAX_RECORDS)
    for i in range(WS_SINK_MAX_PENDING):
        assert commit.take_message(state.make_record("WS", "/ws", {}, str(i)))
    batch = commit.next_batch()
    assert batch is not None
    assert not commit.take_message(state.make_record("WS", "/ws", {}, "one too many"))
    assert state.sink_errors == 1
    commit.settle(batch, stored=True)
    assert commit.take_message(state.make_record("WS", "/ws", {}, "room again"))


def test_a_closed_commit_refuses_and_counts() -> None:
    state = ServerState("test", "none")
    commit: GroupCommit[str] = GroupCommit(state, max_records=10)
    commit.close()
    with pytest.raises(SinkUnavailable):
        commit.take_request(record(state, "late"), "late")
    assert commit.take_message(state.make_record("WS", "/ws", {}, "late"))
    assert state.sink_errors == 2 and commit.idle


@pytest.mark.parametrize("batch", [0, -1, 100_001])
def test_server_options_refuse_a_batch_size_out_of_range(batch: int) -> None:
    with pytest.raises(ValueError, match="mongo_batch"):
        ServerOptions(framework="aiohttp", sink="mongo", mongo_batch=batch)


@pytest.mark.parametrize("seconds", [0, -1, 10.5, float("nan"), float("inf")])
def test_server_options_refuse_a_write_timeout_out_of_range(seconds: float) -> None:
    with pytest.raises(ValueError, match="write_timeout_s"):
        ServerOptions(framework="aiohttp", sink="mongo", write_timeout_s=seconds)


def test_the_write_timeout_shortens_the_contracts_deadline_only_when_given() -> None:
    assert write_timeout_ms(ServerOptions(framework="aiohttp", sink="mongo")) == 10_000
    options = ServerOptions(framework="aiohttp", sink="mongo", write_timeout_s=2.5)
    assert write_timeout_ms(options) == 2_500

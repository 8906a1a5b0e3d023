"""servers/core/ws_messages.py: what every server does with a client's WebSocket message."""

from __future__ import annotations

from typing import Any

import pytest

from servers import contract
from servers.core.sinks import EmptySink
from servers.core.state import ServerState
from servers.core.ws_messages import take_message


class _FullSink:
    """A sink whose queue is full: it refuses every record, as a real one past
    contract.WS_SINK_MAX_PENDING does."""

    def __init__(self) -> None:
        self.refused: list[dict[str, Any]] = []

    def store(self, record: dict[str, Any]) -> bool:
        self.refused.append(record)
        return False

    def close(self) -> None:
        return None


def _state() -> ServerState:
    return ServerState("test", "none")


def test_a_json_object_is_counted_and_stored_and_the_connection_reads_on() -> None:
    state = _state()
    assert take_message(state, EmptySink(state), '{"a": 1}') is None
    assert (state.messages, state.bad, state.stored, state.seq) == (1, 0, 1, 1)


def test_a_full_sink_closes_with_1013_counted_in_messages_not_bad() -> None:
    state = _state()
    sink = _FullSink()
    assert take_message(state, sink, '{"a": 1}') == contract.WS_CLOSE_TRY_AGAIN_LATER
    assert (state.messages, state.bad) == (1, 0)
    (record,) = sink.refused
    assert record["method"] == contract.WEBSOCKET_RECORD_METHOD
    assert record["path"] == contract.ROUTE_WEBSOCKET
    assert (record["headers"], record["body"]) == ({}, '{"a": 1}')


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b'{"a": 1}', contract.WS_CLOSE_UNSUPPORTED_DATA),
        ("[1, 2]", contract.WS_CLOSE_INVALID_PAYLOAD),
        ("not json", contract.WS_CLOSE_INVALID_PAYLOAD),
    ],
)
def test_anything_else_is_bad_and_earns_its_close_code(message: str | bytes, code: int) -> None:
    state = _state()
    assert take_message(state, EmptySink(state), message) == code
    assert (state.messages, state.bad, state.stored, state.seq) == (0, 1, 0, 0)

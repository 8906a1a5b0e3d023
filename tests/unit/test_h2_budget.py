"""The HTTP/2 limits of servers/core/h2_budget.py, without a socket: each kind of frame
that costs work without progress trips its limit one frame past its allowance, progress
raises the allowance, and well-behaved sessions (the h2 library on both sides, as h2load
and a browser use a connection) never trip one."""

from __future__ import annotations

import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived

from harness.verify.h2wire import (
    FRAME_CONTINUATION,
    FRAME_DATA,
    FRAME_HEADERS,
    FRAME_PING,
    FRAME_PRIORITY,
    FRAME_RST_STREAM,
    FRAME_SETTINGS,
    FRAME_WINDOW_UPDATE,
    PREFACE,
    h2_frame,
)
from servers import contract
from servers.core.h2_budget import PROGRESS_BYTES, FrameBudget

# One frame of each counted kind, as an attacker repeats it.
KIND_FRAMES = {
    "reset": h2_frame(FRAME_RST_STREAM, bytes(4), stream_id=1),
    "ping": h2_frame(FRAME_PING, bytes(8)),
    "settings": h2_frame(FRAME_SETTINGS),
    "small-data": h2_frame(FRAME_DATA, b"", stream_id=1),
    "window-update": h2_frame(FRAME_WINDOW_UPDATE, (1).to_bytes(4)),
    "priority": h2_frame(FRAME_PRIORITY, bytes(5), stream_id=3),
}


def _budget() -> FrameBudget:
    budget = FrameBudget()
    assert budget.received(PREFACE) is None
    return budget


def test_every_kind_of_contract_limit_is_counted() -> None:
    assert set(KIND_FRAMES) == set(contract.H2_LIMITS)


@pytest.mark.parametrize("kind", list(KIND_FRAMES))
def test_each_kind_trips_one_frame_past_its_allowance(kind: str) -> None:
    budget = _budget()
    base = contract.H2_LIMITS[kind].base
    assert budget.received(KIND_FRAMES[kind] * base) is None
    assert budget.received(KIND_FRAMES[kind]) == kind
    assert budget.received(b"") == kind  # and stays passed


@pytest.mark.parametrize("kind", list(KIND_FRAMES))
def test_progress_raises_the_allowance(kind: str) -> None:
    budget = _budget()
    limit = contract.H2_LIMITS[kind]
    budget.served(100)
    budget.sent(10 * PROGRESS_BYTES)
    allowed = limit.base + int(limit.per_progress * 110)
    assert budget.allowance(kind) == allowed
    assert budget.received(KIND_FRAMES[kind] * allowed) is None
    assert budget.received(KIND_FRAMES[kind]) == kind


def test_frames_split_across_reads_byte_by_byte_count_the_same() -> None:
    budget = FrameBudget()
    data = PREFACE + KIND_FRAMES["ping"] * (contract.H2_LIMITS["ping"].base + 1)
    said = [budget.received(data[i : i + 1]) for i in range(len(data))]
    assert said[-1] == "ping" and said[:-9].count("ping") == 0


def test_acknowledgements_and_frames_that_make_progress_are_not_counted() -> None:
    budget = _budget()
    many = 10 * max(limit.base for limit in contract.H2_LIMITS.values())
    ping_ack = h2_frame(FRAME_PING, bytes(8), flags=0x1)
    settings_ack = h2_frame(FRAME_SETTINGS, flags=0x1)
    body_end = h2_frame(FRAME_DATA, b"x", flags=0x1, stream_id=1)  # ends its stream
    big_data = h2_frame(FRAME_DATA, bytes(contract.H2_SMALL_DATA_BYTES), stream_id=1)
    assert budget.received((ping_ack + settings_ack + body_end + big_data) * many) is None


def test_received_body_bytes_are_progress() -> None:
    budget = _budget()
    budget.received(h2_frame(FRAME_DATA, bytes(PROGRESS_BYTES), stream_id=1) * 3)
    assert budget.progress == 3


def test_a_header_block_past_its_continuation_frames_or_bytes_trips() -> None:
    budget = _budget()
    headers = h2_frame(FRAME_HEADERS, b"h" * 10, stream_id=1)
    more = h2_frame(FRAME_CONTINUATION, b"c" * 10, stream_id=1)
    last = h2_frame(FRAME_CONTINUATION, b"c", flags=0x4, stream_id=1)
    frames = contract.H2_MAX_CONTINUATION_FRAMES
    assert budget.received((headers + more * (frames - 1) + last) * 3) is None  # each ends
    assert budget.received(headers + more * frames) is None
    assert budget.received(more) == "header-block"
    big = _budget()
    half = h2_frame(FRAME_CONTINUATION, bytes(contract.H2_MAX_HEADER_BLOCK_BYTES // 2))
    assert big.received(headers + half) is None
    assert big.received(half) == "header-block"


class Server:
    """The server's side: each request answered with `body`, sent as its windows allow."""

    def __init__(self, body: bytes) -> None:
        self.conn = H2Connection(H2Configuration(client_side=False))
        self.conn.initiate_connection()
        self.body = body
        self.unsent: dict[int, bytes] = {}
        self.answered = 0

    def receive(self, wire: bytes) -> None:
        for event in self.conn.receive_data(wire):
            if isinstance(event, RequestReceived):
                self.conn.send_headers(event.stream_id, [(":status", "200")])
                self.unsent[event.stream_id] = self.body
        for stream_id, left in list(self.unsent.items()):
            size = min(len(left), self.conn.local_flow_control_window(stream_id), 16384)
            if size < len(left) and size <= 0:
                continue
            self.conn.send_data(stream_id, left[:size], end_stream=size == len(left))
            self.unsent[stream_id] = left[size:]
            if size == len(left):
                del self.unsent[stream_id]
                self.answered += 1


@pytest.mark.parametrize(("body_bytes", "rounds"), [(26, 40), (40 * 1024, 4)])
def test_a_well_behaved_session_of_100_streams_at_a_time_never_trips(
    body_bytes: int, rounds: int
) -> None:
    """As h2load -m 100 uses a connection: 100 requests at once, each answered, the
    client's window reopened as data arrives (WINDOW_UPDATE), a PING a round."""
    client = H2Connection(H2Configuration(client_side=True))
    client.initiate_connection()
    server = Server(bytes(body_bytes))
    budget = FrameBudget()
    request = [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/")]
    for round_ in range(rounds):
        for _ in range(100):
            client.send_headers(client.get_next_available_stream_id(), request, end_stream=True)
        client.ping(round_.to_bytes(8))
        while True:
            wire = client.data_to_send()
            assert budget.received(wire) is None
            before = server.answered
            server.receive(wire)
            budget.served(server.answered - before)
            answer = server.conn.data_to_send()
            if not answer and not server.unsent:
                break
            for event in client.receive_data(answer):
                if isinstance(event, DataReceived) and event.flow_controlled_length:
                    budget.sent(event.flow_controlled_length)
                    client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
    assert budget.passed is None and budget.responses == 100 * rounds

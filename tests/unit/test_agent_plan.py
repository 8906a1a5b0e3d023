"""The WebSocket agent's pure parts: frames, the split over processes, combined lines, and
the breaking point of a connection ramp."""

from __future__ import annotations

import json

from drivers.agent.client import text_frame
from drivers.agent.payloads import PAYLOADS
from drivers.agent.plan import combine_agent_lines, split_schedule
from harness.connections import (
    RampSecond,
    closing_record,
    closing_timeout_s,
    find_breaking_point,
)


def second(
    t: float, open_: int, tick: float = 5.0, failed: int = 0, attempts: int | None = None
) -> RampSecond:
    agents = {
        "open": open_,
        "opened": open_,
        "attempts": open_ + failed if attempts is None else attempts,
        "failed": {"timeout": failed} if failed else {},
        "closed_by_server": {},
    }
    return RampSecond(t, agents, tick, 0)


def test_text_frames_are_masked_and_sized() -> None:
    short = text_frame(PAYLOADS["short"])
    assert short[0] == 0x81 and short[1] == 0x80 | len(PAYLOADS["short"])
    mask, masked = short[2:6], short[6:]
    assert bytes(b ^ mask[i % 4] for i, b in enumerate(masked)) == PAYLOADS["short"]
    long = text_frame(PAYLOADS["long"])
    assert long[1] == 0x80 | 126
    assert 6900 < len(PAYLOADS["long"]) < 7100
    assert json.loads(PAYLOADS["long"])["testKeyValue0"] == "veryVeryLongDataValue"


def test_connections_split_over_processes_and_source_addresses() -> None:
    shares = split_schedule([10_000, 30_000, 45_000], per_process=19_900)
    assert len(shares) == 3
    assert shares[0].sources[0] == "127.0.0.2" and len(shares[0].sources) == 8
    all_sources = [source for share in shares for source in share.sources]
    assert len(set(all_sources)) == len(all_sources) == 24  # no address shared
    for step, target in enumerate([10_000, 30_000, 45_000]):
        assert sum(s.schedule[step] for s in shares) == target
    assert max(s.schedule[-1] for s in shares) <= 19_900


def test_agent_lines_combine() -> None:
    lines = {
        0: {
            "open": 10,
            "opened": 12,
            "attempts": 12,
            "failed": {"refused": 2},
            "step": 1,
            "phase": "holding",
            "closed_by_server": {},
            "messages_sent": 5,
            "cpu_pct": 3.0,
        },
        1: {
            "open": 9,
            "opened": 9,
            "attempts": 10,
            "failed": {"refused": 1, "timeout": 1},
            "step": 1,
            "phase": "holding",
            "closed_by_server": {"1001": 1},
            "messages_sent": 4,
        },
    }
    combined = combine_agent_lines(lines)
    assert combined["open"] == 19 and combined["messages_sent"] == 9
    assert combined["failed"] == {"refused": 3, "timeout": 1}
    assert combined["closed_by_server"] == {"1001": 1}
    assert (combined["step"], combined["phase"]) == (1, "holding")
    assert combined["stopped_by"] == []  # none has ended
    ended = {0: {**lines[0], "stopped_by": "schedule"}, 1: {**lines[1], "stopped_by": "time-limit"}}
    assert combine_agent_lines(ended)["stopped_by"] == ["time-limit", "schedule"]


def test_breaking_point_needs_five_bad_seconds_in_a_row() -> None:
    calm = [second(t, 1000 * t) for t in range(5)]
    blip = [second(5, 5000, tick=1500), second(6, 6000)]
    lagging = [second(t, 1000 * t, tick=2000) for t in range(7, 13)]
    assert find_breaking_point(calm + blip) is None
    broken = find_breaking_point(calm + blip + lagging)
    assert broken == {"connections": 7000, "reason": "tick max 2000 ms > 1000 ms", "t": 7}
    stray = [second(t, 1000 * t, failed=1 if t > 3 else 0) for t in range(1, 12)]
    assert find_breaking_point(stray) is None  # one failure never breaks a run
    # a burst while each step opens, none during the holds: the window keeps it in view
    bursts = [second(t, 100, failed=500 * (t // 4 + 1)) for t in range(1, 12)]
    assert find_breaking_point(bursts)["reason"].startswith("connections failed: timeout")
    # the server stops accepting: attempts outstanding, none completing, no failure yet
    stalled = [second(t, 19_994, attempts=19_994 + 100 * t) for t in range(1, 8)]
    broken = find_breaking_point(stalled)
    assert broken["connections"] == 19_994
    assert broken["reason"] == "handshakes stalled: 200 pending, none completed"
    opening = [second(t, 1000 * t, attempts=1000 * t + 50) for t in range(1, 8)]
    assert find_breaking_point(opening) is None  # handshakes in flight, but completing


def test_one_agent_closing_starts_the_closing_step() -> None:
    holding = {"step": 0, "phase": "holding", "open": 5, "opened": 5}
    closing = {"step": 0, "phase": "closing", "open": 5, "opened": 5, "closing_t": 10.0}
    assert combine_agent_lines({0: holding, 1: holding})["closing"] is False
    both = combine_agent_lines({0: holding, 1: closing})
    assert both["closing"] is True and both["phase"] == "mixed"
    assert combine_agent_lines({0: {**closing, "phase": "final"}})["closing"] is True


def _line(t: float, open_: int, tick_max_ms: float, *, pid: int = 1, gc: int = 0) -> dict:
    return {
        "t": t,
        "pid": pid,
        "open": open_,
        "tick_avg_ms": tick_max_ms / 10,
        "tick_max_ms": tick_max_ms,
        "gc_collections": gc,
        "gc_pause_ms": gc * 2.0,
    }


def test_the_closing_record_reads_the_telemetry_after_the_closing() -> None:
    """Two workers: their open connections at the closing, the worst tick after it (not
    the hold's before), the first line in which neither held any, the GC's gain."""
    telemetry = [
        _line(99.0, 500, 900.0, pid=1, gc=3),  # the ramp's own stall, before the closing
        _line(99.2, 400, 5.0, pid=2, gc=1),
        _line(100.5, 100, 180.0, pid=1, gc=5),
        _line(100.7, 0, 40.0, pid=2, gc=1),
        _line(101.5, 0, 20.0, pid=1, gc=6),
        _line(101.7, 0, 3.0, pid=2, gc=1),
        _line(130.0, 0, 700.0, pid=1, gc=9),  # after the step was followed
    ]
    record = closing_record(telemetry, close="drop", closing_t=100.0, end_t=102.0)
    assert record == {
        "close": "drop",
        "connections": 900,
        "open_after": 0,
        "close_s": 1.5,
        "tick_max_ms": 180.0,
        "tick_avg_ms": round((18.0 + 4.0 + 2.0 + 0.3) / 4, 3),
        "gc_collections": 3,
        "gc_pause_ms": 6.0,
        "followed_s": 2.0,
    }


def test_a_server_that_never_closed_them_all_says_how_many_it_held() -> None:
    telemetry = [_line(99.5, 300, 2.0), _line(100.5, 120, 60.0), _line(101.5, 120, 2.0)]
    record = closing_record(telemetry, close="orderly", closing_t=100.0, end_t=102.0)
    assert (record["connections"], record["open_after"], record["close_s"]) == (300, 120, None)
    assert record["tick_max_ms"] == 60.0


def test_a_large_closing_is_followed_longer_than_a_small_one() -> None:
    """30 s at least; a million connections (Node's, on this 2-core box, still closing
    after 30 s) for 100 s."""
    assert closing_timeout_s(0) == closing_timeout_s(100_000) == 30.0
    assert closing_timeout_s(1_000_000) == 100.0

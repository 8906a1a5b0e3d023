"""The WebSocket agent's pure parts: frames, the split over processes, combined lines, and
the breaking point of a connection ramp."""

from __future__ import annotations

import json

from drivers.agent.client import text_frame
from drivers.agent.payloads import PAYLOADS
from drivers.agent.plan import combine_agent_lines, split_schedule
from harness.connections import _Second, find_breaking_point


def second(
    t: float, open_: int, tick: float = 5.0, failed: int = 0, attempts: int | None = None
) -> _Second:
    agents = {
        "open": open_,
        "opened": open_,
        "attempts": open_ + failed if attempts is None else attempts,
        "failed": {"timeout": failed} if failed else {},
        "closed_by_server": {},
    }
    return _Second(t, agents, tick, 0)


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

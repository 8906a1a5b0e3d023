"""Verify's messages (issue 24, item 1): a failure is one whole line — what was sent, what
was expected, what came, and the remedy. Without a network: fake checks, and a socket pair
for the raw WebSocket close reader."""

from __future__ import annotations

import socket

import pytest

from harness.verify import CheckFailed, expect, raised_line, run_checks
from harness.verify.failure import FAILURE_REMEDY, excerpt, failure_line
from harness.verify.websocket import raw_ws_close


def test_a_failure_is_one_line_sent_expected_came_and_the_remedy() -> None:
    with pytest.raises(CheckFailed) as failed:
        expect(False, sent="GET /", expected="status 200", came="status 500")
    assert (
        str(failed.value) == f"sent GET /; expected status 200; came status 500; {FAILURE_REMEDY}"
    )
    assert FAILURE_REMEDY == (
        "fix the server, or measure it unverified with --no-verify (compare, run)"
    )
    assert (failed.value.sent, failed.value.came) == ("GET /", "status 500")
    expect(True, sent="GET /", expected="status 200", came="status 200")  # holds: silent


def test_a_failure_line_never_breaks() -> None:
    line = failure_line("GET /\r\n", "a\nb", "one\n  two", "fix\u2028it")
    assert line == "sent GET /; expected a b; came one two; fix it"
    assert len(line.splitlines()) == 1


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b"HTTP/1.1 200 OK\r\n", r"b'HTTP/1.1 200 OK\r\n'"),
        ("short", "'short'"),
        (b"x" * 61, repr(b"x" * 60) + "… (61 bytes)"),
        ("é" * 70, repr("é" * 60) + "… (70 characters)"),
    ],
)
def test_a_reply_is_quoted_escaped_and_cut_with_an_ellipsis(data: bytes | str, said: str) -> None:
    assert excerpt(data) == said
    assert "\n" not in excerpt(data)


def test_a_start_of_a_reply_says_the_whole_length() -> None:
    assert excerpt(b"abc", total=300) == "b'abc'… (300 bytes)"


def test_run_checks_records_a_failure_as_its_line_and_a_library_error_as_one_too() -> None:
    def wrong(server: str) -> str:
        expect(False, sent="GET /x", expected="404", came="status 200")
        return "unreachable"

    def refused(server: str) -> str:
        raise ConnectionRefusedError("Connection refused\nat line two " + "z" * 300)

    checks = run_checks("http://127.0.0.1:9", {"not-found": wrong, "text": refused})
    found, text = checks
    assert not found.ok and found.detail.startswith("sent GET /x; expected 404; came status 200;")
    assert not text.ok and "\n" not in text.detail
    assert text.detail.startswith("came ConnectionRefusedError: Connection refused at line two ")
    assert "…" in text.detail and text.detail.endswith(f"; {FAILURE_REMEDY}")


def test_a_bare_error_says_its_type() -> None:
    assert raised_line(TimeoutError()) == (
        f"came TimeoutError (the check stopped there); {FAILURE_REMEDY}"
    )


def _closed_after(*sent: bytes, timeout_s: float = 0.2) -> tuple[int | None, str]:
    server, client = socket.socketpair()
    with server, client:
        for data in sent:
            server.sendall(data)
        if sent and sent[-1] == b"":
            server.shutdown(socket.SHUT_WR)
        return raw_ws_close(client, timeout_s)


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        ((b"\x88\x02\x03\xea",), (1002, "a close frame with code 1002")),
        ((b"\x81\x01x", b"\x88\x02\x03\xef"), (1007, "a close frame with code 1007")),
        ((b"\x88\x00",), (None, "a close frame without a code")),
        ((b"\x81\x01x", b""), (None, "the connection closed without a close frame")),
        ((), (None, "no close frame within 0.2 s")),
    ],
)
def test_how_a_raw_websocket_connection_ended_is_said_in_words(
    sent: tuple[bytes, ...], said: tuple[int | None, str]
) -> None:
    assert _closed_after(*sent) == said

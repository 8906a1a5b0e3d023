"""Verify's messages: a failure is one whole line — what was sent, what
was expected, what came, and the remedy — and a robustness rule bent is a Deviation with
a stable `deviations` key, declared or not, never a failure. Without a network: fake
checks, and a socket pair for the raw WebSocket close reader."""

from __future__ import annotations

import dataclasses
import re
import socket
from pathlib import Path

import pytest

from harness.verify import (
    ROBUSTNESS_CHECKS,
    CheckFailed,
    Deviation,
    Outcome,
    checks_for,
    expect,
    raised_line,
    run_checks,
)
from harness.verify import _known_deviation as known_deviation
from harness.verify.failure import FAILURE_REMEDY, excerpt, failure_line
from harness.verify.h2 import H2_CHECKS, MALFORMED_FRAME_SENT, MALFORMED_FRAMES
from harness.verify.h2_attacks import ATTACKS
from harness.verify.malformed import MALFORMED_REQUESTS
from harness.verify.severity import judge_rule, with_deviations
from harness.verify.tls import tls_checks
from harness.verify.websocket import RAW_FRAME_CASES, RAW_FRAME_SENT, raw_ws_close
from servers import FRAMEWORKS, Framework
from servers.contenders import frameworks as contenders

CONTRACT_MD = Path(__file__).parents[2] / "docs" / "contract.md"


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


@pytest.fixture
def declaring(monkeypatch: pytest.MonkeyPatch) -> str:
    """A server that declares one raw-frame rule bent."""
    entry = Framework(
        "declaring", "servers.none", (), ("x",), deviations={"ws-unmasked-frame": "its parser"}
    )
    monkeypatch.setitem(FRAMEWORKS, entry.name, entry)
    return entry.name


def test_a_rule_bent_is_a_warning_unless_declared(declaring: str) -> None:
    said = {"sent": "a text frame without a mask", "expected": "1002", "came": "1006"}
    assert judge_rule("ws-raw-frames", "ws-invalid-utf8", True, **said) is None
    warning = judge_rule("ws-raw-frames", "ws-invalid-utf8", False, framework=declaring, **said)
    assert warning is not None and warning.warning
    declared = judge_rule("ws-raw-frames", "ws-unmasked-frame", False, framework=declaring, **said)
    assert declared is not None and declared.declared == "its parser"
    assert declared.line().endswith("came 1006; declared: its parser")


def test_a_declared_rule_that_holds_fails_drop_its_declaration(declaring: str) -> None:
    with pytest.raises(CheckFailed) as failed:
        judge_rule(
            "ws-raw-frames",
            "ws-unmasked-frame",
            True,
            sent="a text frame without a mask",
            expected="a close frame with code 1002",
            came="a close frame with code 1002",
            framework=declaring,
        )
    line = str(failed.value)
    assert line.startswith(
        "sent a text frame without a mask; expected the deviation it declares (its parser); "
        "came a close frame with code 1002, as the rule asks; drop its declared deviation: "
        "remove ws-unmasked-frame from deviations in [servers.declaring]"
    )


def test_a_checks_detail_names_its_warnings_then_its_declared_deviations() -> None:
    warned = Deviation("ws-raw-frames", "ws-nan", "NaN", "1007", "none")
    declared = dataclasses.replace(warned, key="ws-invalid-utf8", declared="why")
    assert with_deviations("closed", [None, None]) == "closed"
    said = with_deviations("closed", [None, warned, declared])
    assert isinstance(said, Outcome) and said.deviations == (warned, declared)
    assert said.detail == "closed; deviating: ws-nan; declared deviations: ws-invalid-utf8"


def _fails(server: str) -> str:
    expect(False, sent="GET / after raw frames", expected="200", came="a reset")
    return "unreachable"


def test_a_check_named_in_deviations_declares_what_it_finds_but_not_a_server_that_stops() -> None:
    bent = Deviation("ws-raw-frames", "ws-nan", "NaN", "a close frame with code 1007", "none")

    def lenient(server: str) -> Outcome:
        return Outcome("closed", (bent,))

    said = known_deviation("mine", "ws-raw-frames", lenient, "its library is lenient")("url")
    assert isinstance(said, Outcome) and said.deviations[0].declared == "its library is lenient"
    assert "known deviation: its library is lenient" in said.detail
    stopped = known_deviation("mine", "ws-raw-frames", _fails, "its library is lenient")
    with pytest.raises(CheckFailed, match="came a reset"):
        stopped("url")  # a robustness check's failure: never a deviation
    held = known_deviation("mine", "ws-raw-frames", lambda server: "closed", "lenient")
    with pytest.raises(CheckFailed, match="remove ws-raw-frames from deviations in"):
        held("url")


def test_a_check_of_answers_named_in_deviations_is_a_known_failure() -> None:
    said = known_deviation("mine", "ws-1009", _fails, "its library closes 1006")("url")
    assert isinstance(said, Outcome)
    [deviation] = said.deviations
    assert (deviation.sent, deviation.came, deviation.declared) == (
        "GET / after raw frames",
        "a reset",
        "its library closes 1006",
    )


def test_every_check_of_a_robustness_rule_is_one_a_server_has() -> None:
    names = set(checks_for("gevent")) | set(tls_checks()) | {"h2-malformed-frames", *ATTACKS}
    assert names >= ROBUSTNESS_CHECKS


# Every key a finding may carry: the rules' and the robustness checks' own names.
RULE_KEYS = (
    {name for name, _, _ in MALFORMED_REQUESTS}
    | set(RAW_FRAME_CASES)
    | set(MALFORMED_FRAMES)
    | ROBUSTNESS_CHECKS
)


def test_every_rule_is_said_in_words_and_its_key_is_documented() -> None:
    assert set(RAW_FRAME_SENT) == set(RAW_FRAME_CASES)
    assert set(MALFORMED_FRAME_SENT) == set(MALFORMED_FRAMES)
    documented = set(re.findall(r"`([a-z0-9.-]+)`", CONTRACT_MD.read_text()))
    assert documented >= RULE_KEYS, sorted(RULE_KEYS - documented)
    for key in RULE_KEYS:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", key), key  # a bare TOML key


def test_the_contenders_declare_real_keys() -> None:
    check_names = {*checks_for("gevent"), *tls_checks(), *H2_CHECKS}  # a check's whole
    for entry in contenders():
        unknown = set(entry.deviations) - RULE_KEYS - check_names
        assert not unknown, (entry.name, unknown)


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

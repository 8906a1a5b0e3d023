"""servers.core.framing: the header sections every server answers 400 (RFC 9112 §6.3)."""

from __future__ import annotations

import timeit

import pytest

from servers.core.framing import _TOKEN, COMMON_FIELD_NAMES, framing_error

SAFE = [
    [],
    [("Host", "x"), ("User-Agent", "wrk")],
    [("Content-Length", "3")],
    [("content-length", "0")],
    [("Content-Length", "5"), ("Content-Length", "5")],  # the same length twice
    [("Content-Length", "5, 5")],
    [("Transfer-Encoding", "chunked")],
    [("Transfer-Encoding", "Chunked")],
    [("X-Tab", "a\tb"), ("X-Latin", "caf\xe9")],
]

SMUGGLING = {
    "xchunked": [("Transfer-Encoding", "xchunked")],
    "chunked-then-gzip": [("Transfer-Encoding", "chunked, gzip")],
    "two-transfer-encodings": [("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")],
    "zero-then-another": [("Content-Length", "0"), ("Content-Length", "40")],
    "list-of-two": [("Content-Length", "3, 4")],
    "plus": [("Content-Length", "+3")],
    "minus": [("Content-Length", "-1")],
    "hex": [("Content-Length", "0x10")],
    "empty": [("Content-Length", "")],
    "digits-with-space": [("Content-Length", "3 3")],
    "huge": [("Content-Length", "9" * 40)],
    "both": [("Content-Length", "3"), ("Transfer-Encoding", "chunked")],
    "both-reversed": [("Transfer-Encoding", "chunked"), ("Content-Length", "3")],
    "nul": [("X-A", "a\x00b")],
    "cr": [("X-A", "a\rb")],
    "lf": [("X-A", "a\nb")],
    "obs-fold": [("X-A", "a\r\n b")],
    "del": [("X-A", "a\x7f")],
    "space-before-colon": [("Content-Length ", "3")],
    "name-with-slash": [("X/A", "b")],
    # the common fields' fast path (a set lookup, isprintable) still sees every control
    "common-nul": [("Host", "a\x00b")],
    "common-lf": [("User-Agent", "a\nb")],
    "common-del": [("Accept", "a\x7f")],
    "common-then-smuggling": [("Host", "x"), ("Transfer-Encoding", "xchunked")],
    "common-lowercase-then-both": [
        ("host", "x"),
        ("content-length", "3"),
        ("transfer-encoding", "chunked"),
    ],
}


@pytest.mark.parametrize("headers", SAFE, ids=range(len(SAFE)))
def test_sound_framing_passes(headers: list[tuple[str, str]]) -> None:
    assert framing_error(headers) is None


@pytest.mark.parametrize("case", sorted(SMUGGLING))
def test_ambiguous_framing_is_refused_with_a_reason(case: str) -> None:
    reason = framing_error(SMUGGLING[case])
    assert reason, case


def test_the_common_field_names_are_tokens_that_frame_no_body() -> None:
    # The fast path passes a section of these without the token regex or the framing rules.
    for name in COMMON_FIELD_NAMES:
        assert _TOKEN.fullmatch(name), name
        assert name.lower() not in ("content-length", "transfer-encoding"), name


def test_a_common_field_with_a_tab_or_obs_text_passes() -> None:
    # Not printable, so the fast path hands them to the full check, which allows them.
    assert framing_error([("Host", "a\tb"), ("User-Agent", "caf\xe9 \xa0")]) is None


def test_the_hot_path_costs_a_few_microseconds() -> None:
    headers = [("Host", "127.0.0.1:8080"), ("User-Agent", "wrk"), ("Accept", "*/*")]
    runs = 2000
    seconds = min(timeit.repeat(lambda: framing_error(headers), number=runs, repeat=5))
    assert seconds / runs < 20e-6  # measured ~1 µs; a loose bound for a busy CI machine

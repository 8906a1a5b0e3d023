"""What a probe found on a server on trial for h2 or h2c, in words (harness.negotiation),
without a network: the one line a skipped case carries."""

from __future__ import annotations

import pytest

from harness.negotiation import alpn_words, not_negotiated, preface_words


@pytest.mark.parametrize(
    ("selected", "words"),
    [
        ("http/1.1", "ALPN chose http/1.1, not h2"),
        (None, "ALPN chose none (HTTP/1.1 by default), not h2"),
        ("h2", "ALPN chose h2 only when offered http/1.1 too"),
    ],
)
def test_the_alpn_a_server_selected_is_said_in_words(selected: str | None, words: str) -> None:
    assert alpn_words(selected) == words


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"", "closed the connection on the h2 preface, not h2c"),
        (
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            "answered the h2 preface with 'HTTP/1.1 400 Bad Request', not h2c",
        ),
        (b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", "answered SETTINGS only on a second connection"),
        (b"\x15\x03\x03\x00\x02\x02\x46", "answered the h2 preface with"),
    ],
)
def test_the_answer_to_a_cleartext_preface_is_said_in_words(answer: bytes, words: str) -> None:
    assert preface_words(answer).startswith(words)


def test_only_h2_and_h2c_are_negotiated_and_h2_needs_the_certificates() -> None:
    assert not_negotiated("mine", "h2", "127.0.0.1", 1, None) == (
        "mine: h2 without the run's certificates"
    )
    with pytest.raises(ValueError, match="h1-tls is not negotiated"):
        not_negotiated("mine", "h1-tls", "127.0.0.1", 1, None)

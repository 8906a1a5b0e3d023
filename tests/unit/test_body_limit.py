"""servers/core/body_limit.py: the contract's request-body limit, without a socket."""

from __future__ import annotations

import pytest

from servers import contract
from servers.core.body_limit import BodyCounter, declared_too_large

LIMIT = contract.LOG_MAX_BODY_BYTES


@pytest.mark.parametrize(
    ("declared", "too_large"), [(None, False), (0, False), (LIMIT, False), (LIMIT + 1, True)]
)
def test_a_declared_length_is_judged_before_the_body(declared: int | None, too_large: bool) -> None:
    assert declared_too_large(declared) is too_large


def test_a_counted_body_is_refused_once_past_the_limit() -> None:
    counter = BodyCounter()
    assert counter.take(LIMIT - 1)
    assert counter.take(1)  # exactly the limit is taken
    assert not counter.take(1)
    assert counter.received_bytes == LIMIT + 1


def test_another_limit_is_judged_by_the_same_rule() -> None:
    assert declared_too_large(11, limit_bytes=10)
    assert not declared_too_large(10, limit_bytes=10)
    counter = BodyCounter(limit_bytes=10)
    assert counter.take(10)
    assert not counter.take(1)

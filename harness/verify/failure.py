"""How a check says what was wrong: it raises `CheckFailed` (usually through `expect`)."""

from __future__ import annotations


class CheckFailed(Exception):
    """Raised inside a check with what was wrong."""


def expect(condition: bool, detail: str) -> None:
    """Fail the running check with `detail` unless `condition` holds."""
    if not condition:
        raise CheckFailed(detail)

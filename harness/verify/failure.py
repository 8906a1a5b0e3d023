"""How a check says what was wrong: it raises `CheckFailed` (through `expect`) with what
was sent, what was expected, what came, and the remedy, read as one whole line:

    sent GET /; expected status 200; came status 500; fix the server, or …

The check's name is not in it: whoever reports the failure puts it first (`harness
verify`'s table and its `failed:` lines, a case's `verify failed: NAME: …`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

# What a failure asks of the user: the case is not measured until the server answers
# rightly, unless it is measured unverified (compare's and run's --no-verify).
UNVERIFIED = "measure it unverified with --no-verify (compare, run)"
FAILURE_REMEDY = f"fix the server, or {UNVERIFIED}"
# How much of a reply a finding quotes (bytes or characters), escaped, before its `…`.
EXCERPT_CHARS = 60


def one_line(text: str) -> str:
    """`text` with every run of white space (line breaks among them) made one space."""
    return " ".join(text.split())


def excerpt(data: bytes | str, limit: int = EXCERPT_CHARS, total: int | None = None) -> str:
    """What came, quoted on one line: the repr of its first `limit` bytes (a repr escapes
    line breaks), and when there was more, `…` and the whole length (`total`, when `data`
    is only the start of what came)."""
    total = len(data) if total is None else total
    if total <= limit and len(data) == total:
        return repr(data)
    unit = "bytes" if isinstance(data, bytes) else "characters"
    return f"{data[:limit]!r}… ({total} {unit})"


class CheckFailed(Exception):
    """Raised inside a check: what was sent, what was expected, what came, and the remedy.
    Its message is the one line they make (`failure_line`)."""

    def __init__(
        self,
        *,
        sent: str,
        expected: str,
        came: str,
        remedy: str = FAILURE_REMEDY,
        figures: Mapping[str, object] | None = None,
    ) -> None:
        self.sent, self.expected, self.came = one_line(sent), one_line(expected), one_line(came)
        self.remedy = one_line(remedy)
        self.figures = dict(figures or {})  # what the check measured (verify's JSON)
        super().__init__(failure_line(self.sent, self.expected, self.came, self.remedy))


def failure_line(sent: str, expected: str, came: str, remedy: str = FAILURE_REMEDY) -> str:
    """`sent …; expected …; came …; remedy`, each part made one line."""
    parts = (one_line(sent), one_line(expected), one_line(came), one_line(remedy))
    return "sent {}; expected {}; came {}; {}".format(*parts)


def expect(
    condition: bool, *, sent: str, expected: str, came: str, remedy: str = FAILURE_REMEDY
) -> None:
    """Fail the running check unless `condition` holds, saying what was sent, what was
    expected and what came (and the remedy: fix the server, by default)."""
    if not condition:
        raise CheckFailed(sent=sent, expected=expected, came=came, remedy=remedy)


def expect_status(status: int | None, *, sent: str, wanted: int = 200, came_more: str = "") -> None:
    """Fail the running check unless the reply's status is `wanted` (`came_more` follows
    the status in what came, e.g. a stream's reset code)."""
    expect(
        status == wanted,
        sent=sent,
        expected=f"status {wanted}",
        came=f"status {status}{came_more}",
    )


def fail(
    *,
    sent: str,
    expected: str,
    came: str,
    remedy: str = FAILURE_REMEDY,
    figures: Mapping[str, object] | None = None,
) -> NoReturn:
    """Fail the running check: `expect` of a condition already known not to hold (with
    the `figures` it measured, when it has any)."""
    raise CheckFailed(sent=sent, expected=expected, came=came, remedy=remedy, figures=figures)

"""servers/core/error_replies.py: an error answer's words are fixed, not Python's of the day."""

from __future__ import annotations

import pytest

from servers import contract
from servers.core.body_limit import TOO_LARGE_BODY, TOO_LARGE_STATUS
from servers.core.error_replies import error_body, reason, status_line
from servers.core.workloads import DELAY_REFUSAL_BODY


@pytest.mark.parametrize(
    ("code", "line", "body"),
    [
        (404, "404 Not Found", b"404: Not Found"),
        (405, "405 Method Not Allowed", b"405: Method Not Allowed"),
        (408, "408 Request Timeout", b"408: Request Timeout"),
        # Python 3.13's HTTPStatus calls it "Content Too Large"; our servers do not.
        (413, "413 Request Entity Too Large", b"413: Request Entity Too Large"),
    ],
)
def test_a_code_has_one_status_line_and_one_body(code: int, line: str, body: bytes) -> None:
    assert status_line(code) == line
    assert error_body(code) == body


def test_the_core_bodies_are_built_by_the_same_rule() -> None:
    assert error_body(TOO_LARGE_STATUS) == TOO_LARGE_BODY
    assert error_body(contract.BAD_REQUEST_STATUS) == DELAY_REFUSAL_BODY


def test_a_code_not_in_the_table_falls_back_to_pythons_phrase() -> None:
    assert reason(418) == "I'm a Teapot"

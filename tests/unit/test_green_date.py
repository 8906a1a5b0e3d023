"""The green runtime's text route carries its own Date (servers.runtimes.green.app.DatedHeaders),
made once a second: one Date, of the current second, in the frameworks' format."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

import pytest

from servers.runtimes.green import app as green_app
from servers.runtimes.green.app import DatedHeaders

FIXED = [("Content-Type", "text/plain"), ("Content-Length", "26"), ("Server", "test")]


def test_the_headers_are_the_fixed_ones_and_one_date_of_now() -> None:
    before = int(time.time())
    headers = DatedHeaders(FIXED).now()
    assert headers[:-1] == FIXED and [name for name, _ in headers].count("Date") == 1
    date = headers[-1][1]
    assert date.endswith(" GMT") and len(date) == len("Fri, 04 Dec 2026 22:17:59 GMT")
    assert before <= parsedate_to_datetime(date).timestamp() <= time.time()


def test_one_list_a_second_and_a_new_one_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_800_000_000.2]
    monkeypatch.setattr(green_app.time, "time", lambda: now[0])
    dated = DatedHeaders(FIXED)
    first = dated.now()
    now[0] += 0.7
    assert dated.now() is first  # the same second: the same list, nothing formatted
    now[0] += 0.2  # 1_800_000_001.1
    second = dated.now()
    assert second is not first and second[-1] == ("Date", "Fri, 15 Jan 2027 08:00:01 GMT")
    assert FIXED == [("Content-Type", "text/plain"), ("Content-Length", "26"), ("Server", "test")]

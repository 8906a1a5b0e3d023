"""The minimal plain WSGI app for `harness bench` (gunicorn-gevent), run on gunicorn's
stock gevent workers with the contender's own flags."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

BODY = b"I am a stupid HTTP server!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", HEADERS)
    return [BODY]

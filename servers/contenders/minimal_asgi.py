"""The minimal Starlette app for `harness bench` (uvicorn-starlette, granian): the smallest
idiomatic app answering `GET /` with the contract's text body, run with the contender's
own server flags (servers.contenders: `minimal_command`)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

BODY = b"I am a stupid HTTP server!"


async def hello(request: Request) -> Response:
    return Response(BODY, media_type="text/plain")


app = Starlette(routes=[Route("/", hello)])

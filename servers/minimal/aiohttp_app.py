"""Minimal aiohttp.web hello-world (aiohttp sets TCP_NODELAY itself)."""

from aiohttp import web

BODY = b"I am a stupid HTTP server!"


async def hello(request: web.Request) -> web.Response:
    return web.Response(body=BODY, content_type="text/plain")


def run(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_get("/", hello)
    web.run_app(app, host=host, port=port, access_log=None, print=None)

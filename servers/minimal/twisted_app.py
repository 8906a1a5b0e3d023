"""Minimal twisted.web hello-world (HTTPChannel sets TCP_NODELAY on accepted connections).

The default reactor on Linux is epoll. The access log is off, as in the aiohttp app.
"""

from twisted.web.resource import Resource
from twisted.web.server import Request, Site

BODY = b"I am a stupid HTTP server!"


class Hello(Resource):
    isLeaf = True

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"text/plain")
        return BODY


class QuietSite(Site):
    def log(self, request: Request) -> None:
        pass


def run(host: str, port: int) -> None:
    from twisted.internet import reactor

    reactor.listenTCP(port, QuietSite(Hello()), interface=host)
    reactor.run()

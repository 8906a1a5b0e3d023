"""Minimal tornado.web hello-world (TCP_NODELAY set on each accepted stream, no access log)."""

import asyncio

import tornado.web
from tornado.httpserver import HTTPServer

BODY = b"I am a stupid HTTP server!"


class Hello(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain")
        self.write(BODY)


class NoDelayHTTPServer(HTTPServer):
    def handle_stream(self, stream, address) -> None:
        stream.set_nodelay(True)
        super().handle_stream(stream, address)


async def main(host: str, port: int) -> None:
    app = tornado.web.Application([("/", Hello)], log_function=lambda handler: None)
    NoDelayHTTPServer(app).listen(port, address=host)
    await asyncio.Event().wait()


def run(host: str, port: int) -> None:
    asyncio.run(main(host, port))

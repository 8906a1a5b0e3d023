"""Minimal gevent.pywsgi hello-world (pywsgi does not set TCP_NODELAY itself)."""

from gevent import monkey

monkey.patch_all()

import socket  # noqa: E402  (after monkey-patching, as gevent requires)

from gevent.pywsgi import WSGIServer  # noqa: E402

BODY = b"I am a stupid HTTP server!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]
BACKLOG = 65535  # as our servers' listener (the kernel caps it at somaxconn)


def hello(environ, start_response):
    start_response("200 OK", HEADERS)
    return [BODY]


def run(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = WSGIServer.get_listener((host, port), backlog=BACKLOG, family=family)
    # Accepted sockets inherit it on Linux: no 40 ms delayed-ACK stalls.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    WSGIServer(listener, hello, log=None).serve_forever()

"""Minimal eventlet.wsgi hello-world (eventlet sets TCP_QUICKACK, not TCP_NODELAY)."""

import eventlet

eventlet.monkey_patch()

import socket  # noqa: E402  (after monkey-patching, as eventlet requires)

from eventlet import wsgi  # noqa: E402

BODY = b"I am a stupid HTTP server!"
HEADERS = [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))]
BACKLOG = 65535  # as our servers' listener (eventlet.listen defaults to 50)


def hello(environ, start_response):
    start_response("200 OK", HEADERS)
    return [BODY]


def run(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = eventlet.listen((host, port), family=family, backlog=BACKLOG)
    # Accepted sockets inherit it on Linux: no 40 ms delayed-ACK stalls.
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    wsgi.server(listener, hello, log_output=False, debug=False)

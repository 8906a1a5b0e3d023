"""Minimal eventlet WebSocket server: `eventlet.serve` spawns a green thread per
connection, speaking WebSocket through wsproto as our eventlet server does
(servers.minimal.wsproto_echo)."""

import eventlet

eventlet.monkey_patch()

import socket  # noqa: E402  (after monkey-patching, as eventlet requires)
import sys  # noqa: E402

from eventlet import greenio  # noqa: E402

from servers.minimal.wsproto_echo import handle  # noqa: E402

BACKLOG = 65535  # as our servers' listener (eventlet.listen defaults to 50)


def run(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = eventlet.listen((host, port), family=family, backlog=BACKLOG)
    # eventlet.serve's pool stops accepting at 1,000 connections: unbounded, as ours is
    eventlet.serve(listener, handle, concurrency=sys.maxsize)


def serve(listener: socket.socket) -> None:
    """Serve on `listener`, one of a parent's SO_REUSEPORT sockets opened before this
    process patched (`python -m servers.minimal NAME --ws --workers N`)."""
    green = greenio.GreenSocket(
        listener.family, listener.type, listener.proto, fileno=listener.detach()
    )
    eventlet.serve(green, handle, concurrency=sys.maxsize)

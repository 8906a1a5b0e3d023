"""Minimal gevent WebSocket server: a `StreamServer` greenlet per connection, speaking
WebSocket through wsproto as our gevent server does (servers.minimal.wsproto_echo)."""

from gevent import monkey

monkey.patch_all()

import socket  # noqa: E402  (after monkey-patching, as gevent requires)

from gevent.server import StreamServer  # noqa: E402

from servers.minimal.wsproto_echo import handle  # noqa: E402

BACKLOG = 65535  # as our servers' listener (the kernel caps it at somaxconn)


def run(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = StreamServer.get_listener((host, port), backlog=BACKLOG, family=family)
    StreamServer(listener, handle).serve_forever()


def serve(listener: socket.socket) -> None:
    """Serve on `listener`, one of a parent's SO_REUSEPORT sockets opened before this
    process patched (`python -m servers.minimal NAME --ws --workers N`)."""
    green = socket.socket(listener.family, listener.type, listener.proto, listener.detach())
    StreamServer(green, handle).serve_forever()

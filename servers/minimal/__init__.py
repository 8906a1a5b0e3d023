"""Minimal apps, one per framework: the yardsticks for our servers.

Each `<framework>_app.py` is the smallest idiomatic app that answers `GET /` with the
contract's text body (with TCP_NODELAY, which the framework may not set by itself), and
defines `run(host: str, port: int) -> None`. `harness bench` compares our server against
it on the same core in the same run.

Each `<framework>_ws.py` is the smallest correct WebSocket server of that runtime, as the
framework's (or its WebSocket library's) own docs write one: it accepts the handshake on
the contract's route with the contract's subprotocol, echoes messages and answers a close.
`harness bench --ws` measures idle connections on ours against it (memory and CPU per
connection). Node's is a script beside the Node baselines, whose `ws` package it uses.
"""

from __future__ import annotations

from servers import NODE_DIR

# The runtimes with a minimal WebSocket server: framework → its module (run(host, port)),
# or the Node script that `python -m servers.minimal NAME --ws` execs.
WEBSOCKET_MINIMALS: dict[str, str] = {
    "gevent": "servers.minimal.gevent_ws",
    "eventlet": "servers.minimal.eventlet_ws",
    "tornado": "servers.minimal.tornado_ws",
    "aiohttp": "servers.minimal.aiohttp_ws",
    "twisted": "servers.minimal.twisted_ws",
    "node-http": str(NODE_DIR / "minimal_ws.js"),
    "node-express": str(NODE_DIR / "minimal_ws.js"),  # one `ws` server for both variants
}

"""Today's contenders, shipped as examples of the plugin mechanism (servers.plugins).

Each is a `Framework` of kind `command`: the harness runs the stock server's own command
line (uvicorn, Granian, gunicorn) on an app of this package, exactly as it runs a user's
`--server`. Nothing in the harness knows them by name: pyproject.toml registers
`frameworks` below under the `serverbench.frameworks` entry point, and the `contenders`
extra installs what they need (`pip install serverbench-harness[contenders]`); without it
they are listed as not installed and left out of `--frameworks all`.

- uvicorn-starlette: a Starlette app (servers.contenders.asgi) on uvicorn, uvloop and
  httptools; `/`, `/counter`, `/log`, `/ws`.
- granian: the same Starlette app on Granian (Rust, ASGI, uvloop); `/`, `/log`, `/ws`.
- gunicorn-gevent: a plain WSGI app (servers.contenders.wsgi) on gunicorn's gevent
  workers; `/`, `/counter`, `/log`, `/ws` (on the connection gunicorn hands the app).
- hypercorn: the same Starlette app on hypercorn (h11, h2 and wsproto, uvloop workers);
  `/`, `/log`, `/ws`.
Each has the empty, file and mongo sinks.

Granian and hypercorn have no `/counter`: they hand the app requests, never connections,
and offer no hook on the connection (Granian's HTTP layer is Rust), so the open-connection
count cannot be known (uvicorn's is counted by a protocol subclass, gunicorn's by a worker
subclass).

Protocols (the `protocols` of each entry, docs/contract.md "Protocols"): uvicorn takes
`{tls_cert}`/`{tls_key}` as its own TLS flags (cleartext when they are ""), h1 and h1-tls;
Granian, gunicorn and hypercorn speak all four but need other flags per protocol, so
their commands go through servers.contenders.launch, which picks them and execs the stock
server. The TLS rules a flag cannot set are given through each server's own hook
(servers.contenders.tls).

This module is imported by every harness start: it only describes, it imports no server.
"""

from __future__ import annotations

from typing import Any

from servers import Framework, contract
from servers.contenders.environment import ENVIRONMENT

# `env` sets the app's options (servers.contenders.environment), then the stock command.
_ENV = " ".join(
    ["env", *(f"{name}={{{placeholder}}}" for name, placeholder in ENVIRONMENT.items())]
)
_SINKS = ("empty", "file", "mongo")
_BACKLOG = contract.LISTEN_BACKLOG
# gunicorn's gevent worker serves at most this many connections at once (its default, 1,000,
# would queue a WebSocket ramp's); one process holds ~19,900 sockets here anyway
_WORKER_CONNECTIONS = 20_000
_COUNTING_PROTOCOL = "servers.contenders.uvicorn_protocol:CountingHttpToolsProtocol"
_COUNTING_WORKER = "servers.contenders.wsgi.CountingGeventWorker"


# A launcher's protocol options (servers.contenders.launch), before the server's own.
_LAUNCH = "--protocol {protocol} --tls-cert {tls_cert} --tls-key {tls_key} --"


def uvicorn(app: str, http: str) -> str:
    """uvicorn on uvloop, `http` its HTTP protocol (httptools, or our counting subclass);
    over TLS when `{tls_cert}` is not empty (ALPN: the protocol class's `alpn_protocols`)."""
    return (
        f"{{python}} -m uvicorn {app} --host {{host}} --port {{port}} --workers {{workers}}"
        f" --loop uvloop --http {http} --ws websockets-sansio"
        f" --ws-max-size {contract.WS_MAX_MESSAGE_BYTES} --ws-per-message-deflate false"
        f" --backlog {_BACKLOG} --no-access-log --log-level warning --timeout-graceful-shutdown 3"
        " --ssl-certfile {tls_cert} --ssl-keyfile {tls_key}"
    )


def granian(app: str) -> str:
    """Granian serving ASGI on uvloop; `--http 1` or `2` and TLS by the case's protocol."""
    return (
        f"{{python}} -m servers.contenders.launch granian {_LAUNCH}"
        " --interface asgi --host {host} --port {port}"
        f" --workers {{workers}} --loop uvloop --backlog {_BACKLOG}"
        f" --no-access-log --log-level warning {app}"
    )


def gunicorn(app: str, worker: str) -> str:
    """gunicorn with `worker` (gevent, or our counting subclass of its gevent worker); TLS
    and HTTP/2 by the case's protocol (TLS 1.3 and ALPN: servers.contenders.tls)."""
    return (
        f"{{python}} -m servers.contenders.launch gunicorn {_LAUNCH}"
        f" -k {worker} -b {{host}}:{{port}} -w {{workers}}"
        f" --backlog {_BACKLOG} --worker-connections {_WORKER_CONNECTIONS} --graceful-timeout 3"
        f" --keep-alive 10 --log-level warning -c python:servers.contenders.tls {app}"
    )


def hypercorn(app: str) -> str:
    """hypercorn's uvloop workers: h1 and h2c on a cleartext bind, TLS by the protocol."""
    return (
        f"{{python}} -m servers.contenders.launch hypercorn {_LAUNCH}"
        " --bind {host}:{port} --workers {workers} --worker-class uvloop"
        f" --backlog {_BACKLOG} --keep-alive {int(contract.HEAD_TIMEOUT_S)} --graceful-timeout 3"
        f" --log-level warning {app}"
    )


# What Granian answers otherwise, below the app (which never sees it): not ours to fix.
# (The raw WebSocket frames by their keys, harness.verify.websocket.RAW_FRAME_CASES.)
_TUNGSTENITE = (
    "tungstenite closes the connection on a frame it refuses without the RFC's code (a close "
    "frame without one; RFC 6455 §7.1.7: SHOULD send 1002/1007/1009 first)"
)
GRANIAN_DEVIATIONS = {
    "content-length-and-chunked": "hyper serves a request with both Content-Length and "
    "Transfer-Encoding by the Transfer-Encoding alone and closes the connection after it "
    "(RFC 9112 §6.1 allows that instead of a 400); the app never sees the Content-Length",
    **dict.fromkeys(
        (
            "ws-unmasked-frame",
            "ws-invalid-utf8",
            "ws-2-gib-header",
            "ws-reserved-opcode",
            "ws-one-byte-close",
            "ws-close-reason-not-utf8",
        ),
        _TUNGSTENITE,
    ),
}
# What hypercorn answers otherwise, below the app (which never sees it): not ours to fix.
_WSPROTO = (
    "hypercorn drops the connection without a close frame on any frame wsproto refuses "
    "(RFC 6455 §7.1.7: SHOULD send 1002/1007 first)"
)
HYPERCORN_DEVIATIONS = {
    "content-length-and-chunked": "h11 serves a request with both Content-Length and "
    "Transfer-Encoding by the Transfer-Encoding alone and keeps the connection open, "
    "answering the next request on it (RFC 9112 §6.1: close after responding); the app "
    "cannot close the connection",
    **dict.fromkeys(
        (
            "ws-unmasked-frame",
            "ws-invalid-utf8",
            "ws-close-code-999",
            "ws-reserved-opcode",
            "ws-close-code-1006",
            "ws-one-byte-close",
            "ws-close-reason-not-utf8",
        ),
        _WSPROTO,
    ),
    "ws-2-gib-header": "hypercorn leaves a connection whose frame header declares 2 GiB open, "
    "without a close frame (RFC 6455 §7.1.7: SHOULD send 1009)",
}
# Where a stock server's TLS is looser than the contract's, with no flag or hook to tighten
# it (TLS_MINIMUM_VERSION: clients that can negotiate TLS 1.3 still get it).
# (harness.verify's check names)
TLS12_DEVIATION = {
    "tls-1.2-refused": "{server} also accepts TLS 1.2 and has no setting for a TLS 1.3 minimum",
}
# A TLS handshake left half-sent: the stock server gives the handshake no deadline of its
# own (its request deadline starts after it), so the connection stays open past ours.
HALF_HANDSHAKE_DEVIATION = {
    "tls-half-handshake": "{server} gives a TLS handshake no deadline of its own: one left "
    "half-sent holds its connection past the contract's head deadline",
}


def _tls12(server: str) -> dict[str, str]:
    return {name: why.format(server=server) for name, why in TLS12_DEVIATION.items()}


def _half_handshake(server: str) -> dict[str, str]:
    return {name: why.format(server=server) for name, why in HALF_HANDSHAKE_DEVIATION.items()}


_UVICORN_NO_HTTP2 = (
    "uvicorn's HTTP/2 is its zttp protocol (the zttp package, not installed by the "
    "contenders extra), and /counter counts connections in a subclass of its httptools one"
)
UVICORN_PROTOCOL_NOTES = {
    contract.PROTOCOL_H2: _UVICORN_NO_HTTP2,
    contract.PROTOCOL_H2C: _UVICORN_NO_HTTP2,
}


def _contender(
    name: str, distributions: tuple[str, ...], loops: tuple[str, ...], command: str, **entry: Any
) -> Framework:
    """A contender's registry entry: a `command` server with the three sinks, whose stock
    `command` runs under `env` with the app's options and its own name (the app's
    SERVERBENCH_FRAMEWORK), written once here so the two cannot differ."""
    return Framework(
        name,
        "",
        distributions,
        loops,
        _SINKS,
        kind="command",
        command=f"{_ENV} SERVERBENCH_FRAMEWORK={name} {command}",
        **entry,
    )


def frameworks() -> list[Framework]:
    """The contenders' registry entries (the `serverbench.frameworks` entry point)."""
    routes = (contract.ROUTE_TEXT, contract.ROUTE_COUNTER, contract.ROUTE_LOG)
    without_counter = (contract.ROUTE_TEXT, contract.ROUTE_LOG, contract.ROUTE_WEBSOCKET)
    return [
        _contender(
            "uvicorn-starlette",
            ("uvicorn", "starlette", "httptools", "uvloop", "websockets", "pymongo"),
            ("uvloop",),
            uvicorn("servers.contenders.asgi:app", _COUNTING_PROTOCOL),
            routes=(*routes, contract.ROUTE_WEBSOCKET, *contract.WORKLOAD_ROUTES),
            minimal_command=uvicorn("servers.contenders.minimal_asgi:app", "httptools"),
            deviations={**_tls12("uvicorn"), **_half_handshake("uvicorn")},
            protocols=(contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS),
            protocol_notes=UVICORN_PROTOCOL_NOTES,
        ),
        _contender(
            "granian",
            ("granian", "starlette", "uvloop", "pymongo"),
            ("uvloop",),
            granian("servers.contenders.asgi:app_without_counter"),
            routes=(*without_counter, *contract.WORKLOAD_ROUTES),
            minimal_command=granian("servers.contenders.minimal_asgi:app"),
            deviations=GRANIAN_DEVIATIONS,
            protocols=contract.PROTOCOLS,
        ),
        _contender(
            "gunicorn-gevent",
            ("gunicorn", "gevent", "pymongo"),
            ("gevent",),
            gunicorn("servers.contenders.wsgi:application", _COUNTING_WORKER),
            routes=(*routes, contract.ROUTE_WEBSOCKET, *contract.WORKLOAD_ROUTES),
            minimal_command=gunicorn("servers.contenders.minimal_wsgi:app", "gevent"),
            deviations=_half_handshake("gunicorn"),
            protocols=contract.PROTOCOLS,
        ),
        _contender(
            "hypercorn",
            ("hypercorn", "starlette", "uvloop", "pymongo"),
            ("uvloop",),
            hypercorn("servers.contenders.asgi:app_without_counter"),
            routes=(*without_counter, *contract.WORKLOAD_ROUTES),
            minimal_command=hypercorn("servers.contenders.minimal_asgi:app"),
            deviations={
                **HYPERCORN_DEVIATIONS,
                **_tls12("hypercorn"),
                **_half_handshake("hypercorn"),
            },
            protocols=contract.PROTOCOLS,
        ),
    ]

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
Each has the empty, file and mongo sinks.

Granian has no `/counter`: its Rust HTTP layer hands the app requests, never connections,
so the open-connection count cannot be known (uvicorn's is counted by a protocol subclass,
gunicorn's by a worker subclass).

This module is imported by every harness start: it only describes, it imports no server.
"""

from __future__ import annotations

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


def uvicorn(app: str, http: str) -> str:
    """uvicorn on uvloop, `http` its HTTP protocol (httptools, or our counting subclass)."""
    return (
        f"{{python}} -m uvicorn {app} --host {{host}} --port {{port}} --workers {{workers}}"
        f" --loop uvloop --http {http} --ws websockets-sansio"
        f" --ws-max-size {contract.WS_MAX_MESSAGE_BYTES} --ws-per-message-deflate false"
        f" --backlog {_BACKLOG} --no-access-log --log-level warning --timeout-graceful-shutdown 3"
    )


def granian(app: str) -> str:
    """Granian serving ASGI over HTTP/1.1 on uvloop."""
    return (
        f"{{python}} -m granian --interface asgi --host {{host}} --port {{port}}"
        f" --workers {{workers}} --http 1 --loop uvloop --backlog {_BACKLOG}"
        f" --no-access-log --log-level warning {app}"
    )


def gunicorn(app: str, worker: str) -> str:
    """gunicorn with `worker` (gevent, or our counting subclass of its gevent worker)."""
    return (
        f"{{python}} -m gunicorn -k {worker} -b {{host}}:{{port}} -w {{workers}}"
        f" --backlog {_BACKLOG} --worker-connections {_WORKER_CONNECTIONS} --graceful-timeout 3"
        f" --keep-alive 10 --log-level warning {app}"
    )


# What Granian answers otherwise, below the app (which never sees it): not ours to fix.
GRANIAN_DEVIATIONS = {
    "content-length-and-chunked": "hyper serves a request with both Content-Length and "
    "Transfer-Encoding by the Transfer-Encoding alone and closes the connection after it "
    "(RFC 9112 §6.1 allows that instead of a 400); the app never sees the Content-Length",
    "ws-raw-frames": "tungstenite drops the connection without a close frame on an unmasked "
    "frame, invalid UTF-8 or a frame header over its limit (RFC 6455 §7.1.7: SHOULD send "
    "1002/1007/1009 first)",
}


def frameworks() -> list[Framework]:
    """The contenders' registry entries (the `serverbench.frameworks` entry point)."""
    routes = (contract.ROUTE_TEXT, contract.ROUTE_COUNTER, contract.ROUTE_LOG)
    return [
        Framework(
            "uvicorn-starlette",
            "",
            ("uvicorn", "starlette", "httptools", "uvloop", "websockets", "pymongo"),
            ("uvloop",),
            _SINKS,
            kind="command",
            routes=(*routes, contract.ROUTE_WEBSOCKET),
            command=f"{_ENV} SERVERBENCH_FRAMEWORK=uvicorn-starlette "
            + uvicorn("servers.contenders.asgi:app", _COUNTING_PROTOCOL),
            minimal_command=uvicorn("servers.contenders.minimal_asgi:app", "httptools"),
        ),
        Framework(
            "granian",
            "",
            ("granian", "starlette", "uvloop", "pymongo"),
            ("uvloop",),
            _SINKS,
            kind="command",
            routes=(contract.ROUTE_TEXT, contract.ROUTE_LOG, contract.ROUTE_WEBSOCKET),
            command=f"{_ENV} SERVERBENCH_FRAMEWORK=granian "
            + granian("servers.contenders.asgi:app_without_counter"),
            minimal_command=granian("servers.contenders.minimal_asgi:app"),
            deviations=GRANIAN_DEVIATIONS,
        ),
        Framework(
            "gunicorn-gevent",
            "",
            ("gunicorn", "gevent", "pymongo"),
            ("gevent",),
            _SINKS,
            kind="command",
            routes=(*routes, contract.ROUTE_WEBSOCKET),
            command=f"{_ENV} SERVERBENCH_FRAMEWORK=gunicorn-gevent "
            + gunicorn("servers.contenders.wsgi:application", _COUNTING_WORKER),
            minimal_command=gunicorn("servers.contenders.minimal_wsgi:app", "gevent"),
        ),
    ]

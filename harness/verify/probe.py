"""Which routes a server serves, when it does not say (a server given as a command).

The rule ("404 is not served"): an HTTP route is served unless its probe is answered 404
(what a baseline answers on the routes it lacks). Anything else — 200, a wrong body, 500,
a reset — means served, and the route's checks then judge the answer: a route answered
wrongly fails verify. `/ws` is served when the contract's own valid handshake (Origin
`agent`, subprotocol `myprotocol`) is accepted with 101; a refusal of any status means it
is not, because an ASGI or WSGI app without a WebSocket route cannot answer 404 to an
upgrade (uvicorn answers 403 or 500). The backend routes are probed only with the
backends running (a file of the set, its GridFS copy, the memcached key): without them no
case needs those routes, and they count as not served.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from websockets.exceptions import InvalidStatus, WebSocketException

from harness.services.backends import Backends
from harness.verify.endpoint import EndpointOrUrl, endpoint_of, http_client
from harness.verify.http import Routes
from harness.verify.websocket import ws_connect
from model.scenarios import MC_KEY
from servers import contract

NOT_SERVED_STATUS = 404
PROBE_BODY = b'{"probe": "served_routes"}'


def _probe_status(
    server: EndpointOrUrl, method: str, path: str, body: bytes | None = None
) -> int | None:
    try:
        with http_client(server) as client:
            return client.request(method, path, content=body).status_code
    except httpx.HTTPError:
        return None  # no answer: not a 404, so the route's checks will say what is wrong


def _probe_websocket(server: EndpointOrUrl) -> int | None:
    """101 when the contract's handshake is accepted, else the refusal's status."""
    try:
        with ws_connect(server):
            return 101
    except InvalidStatus as refused:
        return refused.response.status_code
    except (WebSocketException, OSError, TimeoutError):
        return None


def served_routes(server: EndpointOrUrl, backends: Backends | None = None) -> Routes:
    """The routes a running server serves, by the rule above (`NOT_SERVED_STATUS`)."""
    probes: dict[str, Callable[[], int | None]] = {
        contract.ROUTE_TEXT: lambda: _probe_status(server, "GET", contract.ROUTE_TEXT),
        contract.ROUTE_COUNTER: lambda: _probe_status(server, "GET", contract.ROUTE_COUNTER),
        contract.ROUTE_LOG: lambda: _probe_status(server, "POST", contract.ROUTE_LOG, PROBE_BODY),
        # the boards' workloads: a GET of each, `/delay/0`, and a short upload
        **{
            route: lambda route=route: _probe_status(server, "GET", route)
            for route in (
                contract.ROUTE_JSON,
                contract.ROUTE_PLAINTEXT,
                contract.ROUTE_JSON_COMP,
                contract.ROUTE_BODY_10K,
            )
        },
        contract.ROUTE_DELAY_PREFIX: lambda: _probe_status(
            server, "GET", contract.ROUTE_DELAY_PREFIX + "0"
        ),
        contract.ROUTE_UPLOAD: lambda: _probe_status(
            server, "POST", contract.ROUTE_UPLOAD, PROBE_BODY
        ),
    }
    if not endpoint_of(server).h2:  # no WebSocket over HTTP/2 in the contract (RFC 8441)
        probes[contract.ROUTE_WEBSOCKET] = lambda: _probe_websocket(server)
    fileset = backends.fileset if backends is not None else None
    if backends is not None and fileset is not None:
        files = contract.ROUTE_FILES_PREFIX + fileset.names[0]
        probes[contract.ROUTE_FILES_PREFIX] = lambda: _probe_status(server, "GET", files)
        if backends.mongo_url is not None:  # the set is in GridFS too
            gridfs = contract.ROUTE_GRIDFS_PREFIX + fileset.names[0]
            probes[contract.ROUTE_GRIDFS_PREFIX] = lambda: _probe_status(server, "GET", gridfs)
    if backends is not None and backends.memcached is not None:
        mc = contract.ROUTE_MEMCACHED_PREFIX + MC_KEY
        probes[contract.ROUTE_MEMCACHED_PREFIX] = lambda: _probe_status(server, "GET", mc)
    served = []
    for route in contract.ALL_ROUTES:
        if route not in probes:
            continue
        status = probes[route]()
        if route == contract.ROUTE_WEBSOCKET and status in (101, None):
            served.append(route)  # None: no answer at all; its checks say what is wrong
        elif route != contract.ROUTE_WEBSOCKET and status != NOT_SERVED_STATUS:
            served.append(route)
    return tuple(served)

"""The HTTP routes' checks: `/`, `/counter`, `/log`, 404 for unknown paths and for the
routes a baseline does not serve, 405 for wrong methods, and sequential latency over one
keep-alive connection (the delayed-ACK stall of a socket without TCP_NODELAY)."""

from __future__ import annotations

import email.utils
import json
import statistics
import time

from harness.verify.endpoint import EndpointOrUrl, http_client
from harness.verify.failure import expect
from harness.verify.wire import expect_still_serving, get_status
from servers import FRAMEWORKS, contract

SEQUENTIAL_REQUESTS = 200
SEQUENTIAL_MEDIAN_LIMIT_MS = 20.0
LOG_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
WRONG_METHODS = ("POST", "PUT", "DELETE")

Routes = tuple[str, ...]


def check_text_route(server: EndpointOrUrl) -> str:
    """`GET /` three times on one kept-alive connection: body, type, length, Date, Server."""
    with http_client(server) as client:
        for _ in range(3):
            response = client.get(contract.ROUTE_TEXT)
            expect(
                response.status_code == 200,
                f"GET / came status {response.status_code}; expected 200",
            )
            expect(
                response.content == contract.TEXT_BODY,
                f"GET / came body {response.content[:60]!r} ({len(response.content)} bytes); "
                f"expected {contract.TEXT_BODY!r}",
            )
            content_type = response.headers.get("content-type", "")
            expect(
                content_type.startswith(contract.TEXT_CONTENT_TYPE),
                f"Content-Type {content_type!r}",
            )
            length = response.headers.get("content-length")
            expect(
                length == str(len(contract.TEXT_BODY)),
                f"GET / came Content-Length {length!r}; expected {len(contract.TEXT_BODY)} "
                "(a chunked reply has none: send the length)",
            )
            date = response.headers.get("date")
            expect(
                date is not None and email.utils.parsedate_tz(date) is not None, f"Date {date!r}"
            )
            expect(bool(response.headers.get("server")), "no Server header")
    return f"200, {len(response.content)} bytes, Server: {response.headers['server']}, kept alive"


def check_counter_route(server: EndpointOrUrl) -> str:
    """`GET /counter` twice: the contract's fields, this connection open, requests counted."""
    with http_client(server) as client:
        first = client.get(contract.ROUTE_COUNTER)
        second = client.get(contract.ROUTE_COUNTER)
    expect(first.status_code == 200, f"status {first.status_code}")
    content_type = first.headers.get("content-type", "")
    expect(content_type.startswith(contract.JSON_CONTENT_TYPE), f"Content-Type {content_type!r}")
    counter = first.json()
    expect(set(counter) == set(contract.COUNTER_FIELDS), f"fields {sorted(counter)}")
    expect(counter["open"] >= 1, f"open {counter['open']} while this connection is open")
    expect(counter["max_open"] >= counter["open"], f"max_open {counter['max_open']}")
    requests = second.json()["requests"]
    expect(requests == counter["requests"] + 1, f"requests went {counter['requests']}→{requests}")
    return json.dumps(counter)


def check_log_route(server: EndpointOrUrl) -> str:
    """`/log` answers 'success' to every method of LOG_METHODS."""
    with http_client(server) as client:
        for method in LOG_METHODS:
            body = b'{"check": "verify"}' if method != "GET" else None
            response = client.request(method, contract.ROUTE_LOG, content=body)
            expect(response.status_code == 200, f"{method} status {response.status_code}")
            expect(
                response.content == contract.LOG_REPLY_BODY, f"{method} body {response.content!r}"
            )
    return f"{', '.join(LOG_METHODS)} answered 'success'"


def routes_of(framework: str, routes: Routes | None = None) -> Routes:
    """`routes` when given (found by probing), else the registry's; a server that has not
    been probed yet is taken at its word: every route."""
    if routes is not None:
        return routes
    return FRAMEWORKS[framework].routes or contract.ALL_ROUTES


def unserved_targets(framework: str, routes: Routes | None = None) -> list[str]:
    """Paths on the routes `framework` does not serve (a baseline): each must be 404."""
    targets: list[str] = []
    served = routes_of(framework, routes)
    for route in contract.ALL_ROUTES:
        if route in served:
            continue
        if route.endswith("/"):  # a prefix: a name under it, and the bare prefix
            targets += [route + "img-00000.jpg", route.rstrip("/")]
        else:
            targets += [route, route + "/"]
    return targets


def check_not_found(server: EndpointOrUrl, unserved: tuple[str, ...] = ()) -> str:
    """Unknown paths (and the routes a baseline does not serve) are 404; still serving."""
    for target in ("/no/such/route", "/x", *unserved):
        status = get_status(server, target)
        expect(status == 404, f"{target} answered {status}")
    expect_still_serving(server, "a 404")
    return f"404 for {2 + len(unserved)} paths"


def check_wrong_method(server: EndpointOrUrl) -> str:
    """POST, PUT, DELETE on `/` and `/counter` are 405 (nginx's `/` answers any method:
    this rule is checked on servers with `/counter`)."""
    with http_client(server) as client:
        for method in WRONG_METHODS:
            for route in (contract.ROUTE_TEXT, contract.ROUTE_COUNTER):
                status = client.request(method, route).status_code
                expect(status == 405, f"{method} {route} answered {status}")
    return f"405 for {', '.join(WRONG_METHODS)} on / and /counter"


def check_sequential_latency(server: EndpointOrUrl) -> str:
    """The median of back-to-back requests on one keep-alive connection: catches 40 ms stalls."""
    with http_client(server) as client:
        client.get(contract.ROUTE_TEXT)  # connect outside the timing
        latencies_ms = []
        for _ in range(SEQUENTIAL_REQUESTS):
            started = time.perf_counter()
            client.get(contract.ROUTE_TEXT)
            latencies_ms.append((time.perf_counter() - started) * 1000.0)
    median_ms = statistics.median(latencies_ms)
    expect(
        median_ms <= SEQUENTIAL_MEDIAN_LIMIT_MS,
        f"median {median_ms:.1f} ms over {SEQUENTIAL_REQUESTS} sequential requests: "
        "delayed-ACK stalls (is TCP_NODELAY set on every socket?)",
    )
    return f"median {median_ms:.2f} ms, max {max(latencies_ms):.1f} ms"

"""The HTTP routes' checks: `/`, `/counter`, `/log`, 404 for unknown paths and for the
routes a baseline does not serve, 405 for wrong methods, and sequential latency over one
keep-alive connection (the delayed-ACK stall of a socket without TCP_NODELAY)."""

from __future__ import annotations

import email.utils
import json
import statistics
import time

from harness.verify.endpoint import CheckFunction, EndpointOrUrl, http_client
from harness.verify.failure import UNVERIFIED, excerpt, expect, expect_status
from harness.verify.malformed import check_malformed_requests
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
            sent = "GET / (three times on one kept-alive connection)"
            expect_status(response.status_code, sent=sent)
            expect(
                response.content == contract.TEXT_BODY,
                sent=sent,
                expected=f"the body {contract.TEXT_BODY!r}",
                came=f"the body {excerpt(response.content)}",
            )
            content_type = response.headers.get("content-type", "")
            expect(
                content_type.startswith(contract.TEXT_CONTENT_TYPE),
                sent=sent,
                expected=f"Content-Type {contract.TEXT_CONTENT_TYPE}",
                came=f"Content-Type {excerpt(content_type)}",
            )
            length = response.headers.get("content-length")
            expect(
                length == str(len(contract.TEXT_BODY)),
                sent=sent,
                expected=f"Content-Length {len(contract.TEXT_BODY)} (a chunked reply has none: "
                "send the length)",
                came=f"Content-Length {length!r}",
            )
            date = response.headers.get("date")
            expect(
                date is not None and email.utils.parsedate_tz(date) is not None,
                sent=sent,
                expected="a Date header in HTTP-date form (RFC 9110 §5.6.7)",
                came=f"Date {excerpt(date) if date is not None else 'missing'}",
            )
            expect(
                bool(response.headers.get("server")),
                sent=sent,
                expected="a Server header naming the server",
                came="no Server header",
            )
    return f"200, {len(response.content)} bytes, Server: {response.headers['server']}, kept alive"


def check_counter_route(server: EndpointOrUrl) -> str:
    """`GET /counter` twice: the contract's fields, this connection open, requests counted."""
    with http_client(server) as client:
        first = client.get(contract.ROUTE_COUNTER)
        second = client.get(contract.ROUTE_COUNTER)
    sent = "GET /counter twice on one kept-alive connection"
    expect_status(first.status_code, sent=sent)
    content_type = first.headers.get("content-type", "")
    expect(
        content_type.startswith(contract.JSON_CONTENT_TYPE),
        sent=sent,
        expected=f"Content-Type {contract.JSON_CONTENT_TYPE}",
        came=f"Content-Type {excerpt(content_type)}",
    )
    counter = first.json()
    expect(
        isinstance(counter, dict) and set(counter) == set(contract.COUNTER_FIELDS),
        sent=sent,
        expected=f"a JSON object of the fields {', '.join(sorted(contract.COUNTER_FIELDS))}",
        came=excerpt(first.text),
    )
    expect(
        counter["open"] >= 1,
        sent=sent,
        expected="open at least 1 (this connection is open)",
        came=f"open {counter['open']}",
    )
    expect(
        counter["max_open"] >= counter["open"],
        sent=sent,
        expected=f"max_open at least open ({counter['open']})",
        came=f"max_open {counter['max_open']}",
    )
    requests = second.json()["requests"]
    expect(
        requests == counter["requests"] + 1,
        sent=sent,
        expected=f"requests counted: {counter['requests']}, then {counter['requests'] + 1}",
        came=f"{counter['requests']}, then {requests}",
    )
    return json.dumps(counter)


def check_log_route(server: EndpointOrUrl) -> str:
    """`/log` answers 'success' to every method of LOG_METHODS."""
    with http_client(server) as client:
        for method in LOG_METHODS:
            body = b'{"check": "verify"}' if method != "GET" else None
            response = client.request(method, contract.ROUTE_LOG, content=body)
            sent = f"{method} {contract.ROUTE_LOG}" + (f" with the body {body!r}" if body else "")
            expect(
                response.status_code == 200 and response.content == contract.LOG_REPLY_BODY,
                sent=sent,
                expected=f"200 with the body {contract.LOG_REPLY_BODY!r}",
                came=f"{response.status_code} with the body {excerpt(response.content)}",
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
        expect(status == 404, sent=f"GET {target}", expected="404", came=f"status {status}")
    expect_still_serving(server, "a 404")
    return f"404 for {2 + len(unserved)} paths"


def check_wrong_method(server: EndpointOrUrl) -> str:
    """POST, PUT, DELETE on `/` and `/counter` are 405 (nginx's `/` answers any method:
    this rule is checked on servers with `/counter`)."""
    with http_client(server) as client:
        for method in WRONG_METHODS:
            for route in (contract.ROUTE_TEXT, contract.ROUTE_COUNTER):
                status = client.request(method, route).status_code
                expect(status == 405, sent=f"{method} {route}", expected="405", came=f"{status}")
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
        sent=f"{SEQUENTIAL_REQUESTS} GET / back to back on one kept-alive connection",
        expected=f"a median of at most {SEQUENTIAL_MEDIAN_LIMIT_MS:g} ms",
        came=f"a median of {median_ms:.1f} ms: delayed-ACK stalls",
        remedy=f"set TCP_NODELAY on every socket of the server, or {UNVERIFIED}",
    )
    return f"median {median_ms:.2f} ms, max {max(latencies_ms):.1f} ms"


# The checks of the contract's own routes (the boards' workloads are workloads.py's).
HTTP_ROUTE_CHECKS: dict[str, CheckFunction] = {
    "text": check_text_route,
    "counter": check_counter_route,
    "log": check_log_route,
    "not-found": check_not_found,
    "wrong-method": check_wrong_method,
    "malformed": check_malformed_requests,
    "sequential-latency": check_sequential_latency,
}
# The route each check needs: a server that does not serve it reports "not supported".
HTTP_CHECK_ROUTES: dict[str, str] = {
    "text": contract.ROUTE_TEXT,
    "counter": contract.ROUTE_COUNTER,
    "log": contract.ROUTE_LOG,
    "not-found": contract.ROUTE_TEXT,
    "wrong-method": contract.ROUTE_COUNTER,
    "malformed": contract.ROUTE_TEXT,
    "sequential-latency": contract.ROUTE_TEXT,
}
# The HTTP/1.1 checks HTTP/2 has no room for, and why: `not supported` over h2 and h2c.
HTTP_NOT_OVER_H2: dict[str, str] = {
    "malformed": "HTTP/1.1 framing; HTTP/2's malformed input is h2-malformed-frames",
}

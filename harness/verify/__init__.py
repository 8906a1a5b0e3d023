"""`harness verify`: check a server honours the wire contract before any number is taken.

Like TechEmpower's verify pass: status, headers and bodies of every route, 404 for unknown
paths and for the routes a baseline does not serve, 405 for wrong methods, malformed
requests refused with the server still serving, the WebSocket handshake and its refusals
and closes, file escapes, the memcached socket service, and a sequential-latency check
over one keep-alive connection that catches delayed-ACK stalls (a socket without
TCP_NODELAY). Each check names the route it needs (`CHECK_ROUTES`,
`BACKEND_CHECK_ROUTES`), so a baseline is checked on the routes it serves. A server that
does not say which routes it serves (one given as a command) is probed first
(`served_routes`): a route answered 404 is not served, and its checks are `not supported`.

These checks are the one contract checker: the test suite runs them over every registered
server (tests/e2e/test_conformance.py) and the runner before every case. This module
holds the dispatch (which checks a server gets over which protocol: `checks_for`,
`not_supported`) and the entry point (`verify_framework`); the rest lives by concern
beside it:

- results.py: `Check`, `Verification`, running checks (`run_checks`), `--strict-verify`
- judgement.py: a wrong answer as a failure or a deviation (robustness checks, the route
  a case measures, a server's declared deviations)
- server.py: the verified server's options, and the checks of its telemetry and its stop
- batch.py, console.py: `harness verify` over many servers, and its terminal table

The checks, one module per protocol or route (each declares its checks' registry):

- wire.py: raw bytes to a server and back (the helpers every raw check uses)
- http.py: `/`, `/counter`, `/log`, 404s, 405s, sequential latency
- workloads.py: the boards' workload routes (`/json`, `/plaintext`, pipelining, ...)
- malformed.py: the malformed requests and their known deviations
- severity.py: a failure (a wrong answer: the case is not measured) against a deviation
  (a robustness rule bent: recorded, a warning unless declared; `--strict-verify` fails it)
- websocket.py: `/ws`, its refusals, close codes and raw frames
- sinks.py: a record reaching the sink
- files.py, memcached.py, backends.py: `/files`, `/gridfs`, `/mc` and the socket service
- probe.py: which routes a server given as a command serves
- endpoint.py: how a check reaches a server (protocol, CA): the one connection factory
- tls.py: the TLS checks of h1-tls and h2 (handshake, ALPN, TLS hostile input)
- h2wire.py, h2.py: HTTP/2 over a socket (the h2 library), and the h2 and h2c checks
- flood.py, h2_attacks.py: one hostile HTTP/2 connection and what it costs the server

Every check takes the server as an `Endpoint` (or a plain URL: cleartext HTTP/1.1). Over
h1-tls every HTTP/1.1 check runs over TLS; over h2 and h2c the route checks speak HTTP/2
and the HTTP/1.1-only ones (malformed framing, WebSocket) are `not supported`.
"""

from __future__ import annotations

import contextlib

from harness.negotiation import on_trial, trial_finding
from harness.server_process import ServerProcess, start_server
from harness.services.backends import Backends
from harness.services.fileset import FileSet
from harness.services.sink_store import SinkStore
from harness.tls import Certificates, temporary_certificates
from harness.verify.backends import (
    BACKEND_CHECK_ROUTES,
    backend_checks,
    served_backend_checks,
    verify_backends,
)
from harness.verify.endpoint import (
    H2_PROTOCOLS,
    CheckFunction,
    Endpoint,
    EndpointOrUrl,
    endpoint_for,
    endpoint_of,
    http_client,
    open_connection,
)
from harness.verify.failure import CheckFailed, expect, failure_line
from harness.verify.files import (
    ESCAPE_BAIT_NAME,
    ESCAPE_LINK_NAME,
    ESCAPES,
    VERIFY_FILE_COUNT,
    check_escapes,
    check_file_route,
    one_of_each_kind,
    plant_escape_bait,
)
from harness.verify.h2 import H2_CHECKS, MALFORMED_FRAMES, check_h2_malformed_frames
from harness.verify.h2_attacks import attack_checks
from harness.verify.h2wire import H2Session, h2_exchange, h2_frame
from harness.verify.http import (
    HTTP_CHECK_ROUTES,
    HTTP_NOT_OVER_H2,
    HTTP_ROUTE_CHECKS,
    LOG_METHODS,
    SEQUENTIAL_MEDIAN_LIMIT_MS,
    SEQUENTIAL_REQUESTS,
    WRONG_METHODS,
    Routes,
    check_counter_route,
    check_log_route,
    check_not_found,
    check_sequential_latency,
    check_text_route,
    check_wrong_method,
    routes_of,
    unserved_targets,
)
from harness.verify.judgement import (
    ANSWER_CHECK_ROUTES,
    ROBUSTNESS_CHECKS,
    known_deviation,
    measured_checks,
)
from harness.verify.malformed import (
    MALFORMED_DEVIATIONS,
    MALFORMED_QUIET_S,
    MALFORMED_REQUESTS,
    SMUGGLED,
    check_malformed_requests,
)
from harness.verify.memcached import check_memcached_route, check_memcached_socket
from harness.verify.probe import NOT_SERVED_STATUS, PROBE_BODY, served_routes
from harness.verify.results import (
    ERROR_CHARS,
    NO_TELEMETRY,
    Check,
    Verification,
    check_telemetry,
    raised_line,
    run_checks,
    stopped_cleanly,
    strictly,
)
from harness.verify.server import life_checks, server_args
from harness.verify.severity import (
    Deviation,
    Outcome,
    deviation_from_dict,
    remedy,
)
from harness.verify.sinks import check_sink_record
from harness.verify.tls import tls_checks
from harness.verify.websocket import (
    RAW_FRAME_CASES,
    WEBSOCKET_CHECK_ROUTES,
    WEBSOCKET_CHECKS,
    WEBSOCKET_NOT_OVER_H2,
    check_websocket_binary,
    check_websocket_handshake,
    check_websocket_invalid_json,
    check_websocket_long_message,
    check_websocket_origin,
    check_websocket_raw_frames,
    check_websocket_subprotocol,
    check_websocket_too_big,
    raw_ws_close_code,
    raw_ws_connect,
    ws_frame,
)
from harness.verify.wire import (
    ESCAPE_BAIT,
    raw_exchange,
    read_until_close,
    responses,
    status_of,
)
from harness.verify.workloads import NOT_OVER_H2 as WORKLOADS_NOT_OVER_H2
from harness.verify.workloads import WORKLOAD_CHECK_ROUTES, WORKLOAD_CHECKS
from model.errors import UserError
from servers import FRAMEWORKS, contract

# The names the tests import from before the split (raw reply helpers).
_responses = responses
_status_of = status_of
_known_deviation = known_deviation

__all__ = [
    "ANSWER_CHECK_ROUTES",
    "BACKEND_CHECK_ROUTES",
    "CHECK_ROUTES",
    "ERROR_CHARS",
    "ESCAPES",
    "ESCAPE_BAIT",
    "ESCAPE_BAIT_NAME",
    "ESCAPE_LINK_NAME",
    "H2_CHECKS",
    "H2_PROTOCOLS",
    "HTTP_CHECKS",
    "LOG_METHODS",
    "MALFORMED_DEVIATIONS",
    "MALFORMED_FRAMES",
    "MALFORMED_QUIET_S",
    "MALFORMED_REQUESTS",
    "NOT_OVER_H2",
    "NOT_SERVED_STATUS",
    "NO_SOCKET_SERVICE",
    "NO_TELEMETRY",
    "PROBE_BODY",
    "RAW_FRAME_CASES",
    "ROBUSTNESS_CHECKS",
    "SEQUENTIAL_MEDIAN_LIMIT_MS",
    "SEQUENTIAL_REQUESTS",
    "SMUGGLED",
    "VERIFY_FILE_COUNT",
    "WEBSOCKET_CHECKS",
    "WORKLOAD_CHECKS",
    "WRONG_METHODS",
    "Check",
    "CheckFailed",
    "CheckFunction",
    "Deviation",
    "Endpoint",
    "EndpointOrUrl",
    "H2Session",
    "Outcome",
    "Routes",
    "Verification",
    "_responses",
    "_status_of",
    "backend_checks",
    "check_counter_route",
    "check_escapes",
    "check_file_route",
    "check_log_route",
    "check_malformed_requests",
    "check_memcached_route",
    "check_memcached_socket",
    "check_not_found",
    "check_sequential_latency",
    "check_sink_record",
    "check_telemetry",
    "check_text_route",
    "check_websocket_binary",
    "check_websocket_handshake",
    "check_websocket_invalid_json",
    "check_websocket_long_message",
    "check_websocket_origin",
    "check_websocket_raw_frames",
    "check_websocket_subprotocol",
    "check_websocket_too_big",
    "check_wrong_method",
    "checks_for",
    "contract_check_names",
    "contract_checks",
    "deviation_from_dict",
    "endpoint_for",
    "endpoint_of",
    "expect",
    "failure_line",
    "h2_exchange",
    "h2_frame",
    "http_client",
    "measured_checks",
    "not_supported",
    "one_of_each_kind",
    "open_connection",
    "plant_escape_bait",
    "protocol_checks",
    "raised_line",
    "raw_exchange",
    "raw_ws_close_code",
    "raw_ws_connect",
    "read_until_close",
    "remedy",
    "responses",
    "routes_of",
    "run_checks",
    "served_backend_checks",
    "served_routes",
    "status_of",
    "stopped_cleanly",
    "strictly",
    "tls_checks",
    "verify_backends",
    "verify_framework",
    "ws_frame",
]


# Each protocol's checks, the route each needs (a server that does not serve it reports
# "not supported"), and the ones HTTP/2 has no room for (`not supported` over h2 and h2c).
HTTP_CHECKS: dict[str, CheckFunction] = HTTP_ROUTE_CHECKS | WORKLOAD_CHECKS
CHECK_ROUTES: dict[str, str] = HTTP_CHECK_ROUTES | WEBSOCKET_CHECK_ROUTES | WORKLOAD_CHECK_ROUTES
NOT_OVER_H2: dict[str, str] = HTTP_NOT_OVER_H2 | WEBSOCKET_NOT_OVER_H2 | WORKLOADS_NOT_OVER_H2


def protocol_checks(
    protocol: str, head_timeout_s: float = contract.HEAD_TIMEOUT_S
) -> dict[str, CheckFunction]:
    """The checks of `protocol` itself: TLS's for h1-tls and h2 (the half-sent handshake
    judged against `head_timeout_s`, the server's head deadline), HTTP/2's for h2 and h2c."""
    checks: dict[str, CheckFunction] = {}
    if protocol in contract.TLS_PROTOCOLS:
        checks |= tls_checks(head_timeout_s)
    if protocol in H2_PROTOCOLS:
        checks |= H2_CHECKS
    return checks


def checks_for(
    framework: str,
    routes: Routes | None = None,
    protocol: str = contract.PROTOCOL_H1,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
) -> dict[str, CheckFunction]:
    """The HTTP and WebSocket checks of the routes `framework` serves (`routes`: as found
    by probing it) that `protocol` has room for, and the protocol's own checks."""
    served = routes_of(framework, routes)
    checks = {
        name: check
        for name, check in (HTTP_CHECKS | WEBSOCKET_CHECKS).items()
        if CHECK_ROUTES[name] in served and not (protocol in H2_PROTOCOLS and name in NOT_OVER_H2)
    }
    if "malformed" in checks:
        checks["malformed"] = lambda server: check_malformed_requests(server, framework)
    if "ws-raw-frames" in checks:
        checks["ws-raw-frames"] = lambda server: check_websocket_raw_frames(server, framework)
    if "not-found" in checks:
        unserved = tuple(unserved_targets(framework, routes))
        checks["not-found"] = lambda server: check_not_found(server, unserved)
    checks |= protocol_checks(protocol, head_timeout_s)
    checks |= attack_checks(framework) if protocol in H2_PROTOCOLS else {}
    if "h2-malformed-frames" in checks:
        checks["h2-malformed-frames"] = lambda server: check_h2_malformed_frames(server, framework)
    for name, reason in FRAMEWORKS[framework].deviations.items():
        if name in checks:  # the others name one rule of a check (a malformed request)
            checks[name] = known_deviation(framework, name, checks[name], reason)
    return checks


# The memcached socket service is `python -m servers`' own (--mc-socket-port): a server
# run as a command does not have it, whether or not it serves /mc/{key}.
NO_SOCKET_SERVICE = "not supported (the memcached socket service is python -m servers' own)"


def not_supported(
    framework: str,
    backends: bool = False,
    routes: Routes | None = None,
    protocol: str = contract.PROTOCOL_H1,
) -> tuple[Check, ...]:
    """The checks skipped because `framework` does not serve their route (a baseline, or
    a route a command's server answered 404 when probed); with `backends`, the backend
    checks' too; over h2 and h2c, the HTTP/1.1-only checks (`NOT_OVER_H2`)."""
    served = routes_of(framework, routes)

    def why(route: str) -> str:
        if routes is None:
            note = FRAMEWORKS[framework].route_notes.get(route)
            return f"{route}: {note}" if note else route
        return f"{route}: {'handshake refused' if route == contract.ROUTE_WEBSOCKET else '404'}"

    checks = CHECK_ROUTES | (BACKEND_CHECK_ROUTES if backends else {})
    skipped = [
        Check(name, True, f"not supported ({why(route)})", supported=False)
        for name, route in checks.items()
        if route not in served
    ]
    if protocol in H2_PROTOCOLS:
        skipped += [
            Check(name, True, f"not supported over {protocol} ({reason})", supported=False)
            for name, reason in NOT_OVER_H2.items()
            if CHECK_ROUTES[name] in served
        ]
    if (
        backends
        and not FRAMEWORKS[framework].telemetry
        and contract.ROUTE_MEMCACHED_PREFIX in served
    ):
        skipped.append(Check("memcached-socket", True, NO_SOCKET_SERVICE, supported=False))
    return tuple(skipped)


def contract_checks(
    framework: str,
    fileset: FileSet | None = None,
    mc_port: int = 0,
    routes: Routes | None = None,
    protocol: str = contract.PROTOCOL_H1,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
) -> dict[str, CheckFunction]:
    """Every check of the routes `framework` serves over `protocol`; with a file set (and
    the server's memcached socket port), the backend checks too. The one contract checker:
    `harness verify` and the test suite run these; the runner's verify pass runs
    `checks_for`, the part that needs no backend."""
    return checks_for(framework, routes, protocol, head_timeout_s) | served_backend_checks(
        framework, fileset, mc_port, routes
    )


def contract_check_names(framework: str, protocol: str = contract.PROTOCOL_H1) -> list[str]:
    """The names `contract_checks(framework, fileset, protocol=protocol)` has, known
    without a server."""
    served = routes_of(framework)
    return [*checks_for(framework, protocol=protocol)] + [
        name
        for name, route in BACKEND_CHECK_ROUTES.items()
        if route in served and (FRAMEWORKS[framework].telemetry or name != "memcached-socket")
    ]


def verify_framework(
    framework: str,
    sink: str = "empty",
    cpus: str | None = None,
    mongo_url: str | None = None,
    backends: Backends | None = None,
    mongo_db: str = contract.GRIDFS_DATABASE,
    protocol: str = contract.PROTOCOL_H1,
    certificates: Certificates | None = None,
    client_timeout_s: float | None = None,
) -> Verification:
    """Start `framework` with `sink` speaking `protocol`, run every check of the routes it
    serves over it (with `backends`: files, GridFS, memcached too), stop it (exit status
    checked too). A server that does not say which routes it serves is probed for them
    first (`served_routes`). A TLS protocol's server serves `certificates` (None: a
    throwaway CA and certificate made for this verification, removed after). With
    `client_timeout_s` a contract server's deadlines are that short (--client-timeout-s):
    the half-sent TLS handshake is judged against it. A framework that does not speak
    `protocol` is skipped with its reason (`Framework.why_not`)."""
    info = FRAMEWORKS[framework]
    if protocol not in info.protocols:
        return Verification(framework, sink, skipped=info.why_not(protocol), protocol=protocol)
    if sink not in info.sinks:
        skipped = f"{framework} has no {sink} sink"
        return Verification(framework, sink, skipped=skipped, protocol=protocol)
    try:
        store = SinkStore(sink, mongo_url=mongo_url, mongo_db=mongo_db)
    except UserError as error:
        return Verification(framework, sink, error=str(error), protocol=protocol)
    head_timeout_s = contract.HEAD_TIMEOUT_S
    if client_timeout_s is not None and info.telemetry:  # a contract server's option
        head_timeout_s = client_timeout_s
    with store, contextlib.ExitStack() as stack:
        if protocol in contract.TLS_PROTOCOLS and certificates is None:
            holder, certificates = temporary_certificates()
            stack.enter_context(holder)
        args = server_args(framework, store, backends, mongo_db, client_timeout_s)
        try:
            server = start_server(
                framework, sink=sink, cpus=cpus, extra_args=args, protocol=protocol,
                certificates=certificates,
            )  # fmt: skip
        except Exception as error:  # a server that cannot start is a failed verification
            return Verification(framework, sink, error=str(error), protocol=protocol)
        try:
            found = _check_running(server, store, protocol, certificates, backends, head_timeout_s)
        finally:
            status = server.stop()
    if isinstance(found, str):  # a command probed on a protocol it did not declare
        return Verification(framework, sink, skipped=found, protocol=protocol)
    lives = life_checks(framework, status, server.telemetry_lines())
    return Verification(framework, sink, (*found, *lives), protocol=protocol)


def _check_running(
    server: ServerProcess,
    store: SinkStore,
    protocol: str,
    certificates: Certificates | None,
    backends: Backends | None,
    head_timeout_s: float,
) -> tuple[Check, ...] | str:
    """Every check of the running `server` over `protocol`: its routes' (probed first when
    it does not say which it serves), its sink's record, its backends', and the ones it is
    not offered; or, for a command started on a protocol it did not declare and does not
    speak, why it is skipped."""
    framework = server.framework
    info = FRAMEWORKS[framework]
    if on_trial(info, protocol):  # a command that did not declare it: probed first
        why_not = trial_finding(framework, protocol, server.host, server.port, certificates)
        if why_not is not None:
            return why_not
    endpoint = endpoint_for(server.url, protocol, certificates)
    routes = None if info.routes is not None else served_routes(endpoint, backends)
    checks = run_checks(endpoint, checks_for(framework, routes, protocol, head_timeout_s))
    if store.sink != "empty":
        checks += run_checks(endpoint, {"sink-record": lambda url: check_sink_record(url, store)})
    if backends is not None:
        lines = server.telemetry_lines()
        mc_port = int(lines[0].get("mc_port") or 0) if lines else 0
        checks += run_checks(
            endpoint, served_backend_checks(framework, backends.fileset, mc_port, routes)
        )
    return checks + not_supported(
        framework, backends=backends is not None, routes=routes, protocol=protocol
    )

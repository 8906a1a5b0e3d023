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
holds the checker (which checks a server gets, running them, `verify_framework`); the
checks live by concern beside it:

- wire.py: raw bytes to a server and back (the helpers every raw check uses)
- http.py: `/`, `/counter`, `/log`, 404s, 405s, sequential latency
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
import dataclasses
import signal
from dataclasses import asdict, dataclass, field

import httpx
from h2.exceptions import H2Error
from websockets.exceptions import WebSocketException

from harness.negotiation import on_trial, trial_finding
from harness.server_process import start_server
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
from harness.verify.failure import (
    FAILURE_REMEDY,
    CheckFailed,
    expect,
    failure_line,
    one_line,
)
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
from harness.verify.h2_attacks import ATTACKS, attack_checks
from harness.verify.h2wire import H2Session, h2_exchange, h2_frame
from harness.verify.http import (
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
from harness.verify.malformed import (
    MALFORMED_DEVIATIONS,
    MALFORMED_QUIET_S,
    MALFORMED_REQUESTS,
    SMUGGLED,
    check_malformed_requests,
)
from harness.verify.memcached import check_memcached_route, check_memcached_socket
from harness.verify.probe import NOT_SERVED_STATUS, PROBE_BODY, served_routes
from harness.verify.severity import (
    Deviation,
    Outcome,
    deviation_from_dict,
    remedy,
    stale_remedy,
)
from harness.verify.sinks import check_sink_record
from harness.verify.tls import tls_checks
from harness.verify.websocket import (
    RAW_FRAME_CASES,
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

__all__ = [
    "BACKEND_CHECK_ROUTES",
    "CHECK_ROUTES",
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


@dataclass(frozen=True)
class Check:
    """One verified property: its name, whether it held, and what was seen; a check that
    held may carry deviations (harness.verify.severity): warnings unless declared."""

    name: str
    ok: bool
    detail: str = ""
    supported: bool = True  # False: the server does not serve this route (not a failure)
    deviations: tuple[Deviation, ...] = ()
    figures: dict[str, object] = field(default_factory=dict, hash=False)  # what it measured

    @property
    def warnings(self) -> tuple[Deviation, ...]:
        """The deviations the server does not declare."""
        return tuple(d for d in self.deviations if d.warning)

    def record(self) -> dict[str, object]:
        """The check as a case's `verify` entry in run.json: ok, detail, and its
        deviations when it has any."""
        entry: dict[str, object] = {"ok": self.ok, "detail": self.detail}
        if self.deviations:
            entry["deviations"] = [d.to_dict() for d in self.deviations]
        if self.figures:
            entry["figures"] = self.figures
        return entry


def strictly(checks: tuple[Check, ...], server: str | None = None) -> tuple[Check, ...]:
    """`--strict-verify`: every check with a warning fails, its detail each warning's
    whole line (declared deviations stay what they are)."""
    return tuple(
        dataclasses.replace(
            check,
            ok=False,
            detail="; ".join(d.line(server, with_check=False) for d in check.warnings),
        )
        if check.warnings
        else check
        for check in checks
    )


@dataclass(frozen=True)
class Verification:
    """Every check of one framework (with one sink)."""

    framework: str
    sink: str
    checks: tuple[Check, ...] = field(default_factory=tuple)
    error: str | None = None  # the server could not be started
    skipped: str | None = None  # the framework does not offer this sink or protocol (yet)
    protocol: str = contract.PROTOCOL_H1  # what the checks spoke (servers.contract.PROTOCOLS)

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    @property
    def warnings(self) -> tuple[Deviation, ...]:
        """Every undeclared deviation of the checks that held (under --strict-verify a
        check with one fails: its warnings are its failure)."""
        return tuple(d for c in self.checks if c.ok for d in c.warnings)

    def to_dict(self) -> dict[str, object]:
        return {
            "framework": self.framework,
            "sink": self.sink,
            "protocol": self.protocol,
            "ok": self.ok,
            "error": self.error,
            "skipped": self.skipped,
            "checks": [asdict(c) for c in self.checks],
        }


HTTP_CHECKS: dict[str, CheckFunction] = {
    "text": check_text_route,
    "counter": check_counter_route,
    "log": check_log_route,
    "not-found": check_not_found,
    "wrong-method": check_wrong_method,
    "malformed": check_malformed_requests,
    "sequential-latency": check_sequential_latency,
    **WORKLOAD_CHECKS,  # the boards' workloads (workloads.py)
}
WEBSOCKET_CHECKS: dict[str, CheckFunction] = {
    "ws-handshake": check_websocket_handshake,
    "ws-long-message": check_websocket_long_message,
    "ws-origin": check_websocket_origin,
    "ws-subprotocol": check_websocket_subprotocol,
    "ws-1003": check_websocket_binary,
    "ws-1007": check_websocket_invalid_json,
    "ws-1009": check_websocket_too_big,
    "ws-raw-frames": check_websocket_raw_frames,
}


# The route each check needs: a server that does not serve it reports "not supported".
CHECK_ROUTES: dict[str, str] = {
    "text": contract.ROUTE_TEXT,
    "counter": contract.ROUTE_COUNTER,
    "log": contract.ROUTE_LOG,
    "not-found": contract.ROUTE_TEXT,
    "wrong-method": contract.ROUTE_COUNTER,
    "malformed": contract.ROUTE_TEXT,
    "sequential-latency": contract.ROUTE_TEXT,
    **dict.fromkeys(WEBSOCKET_CHECKS, contract.ROUTE_WEBSOCKET),
    **WORKLOAD_CHECK_ROUTES,
}
# The checks HTTP/2 has no room for, and why: they are `not supported` over h2 and h2c.
NOT_OVER_H2: dict[str, str] = {
    "malformed": "HTTP/1.1 framing; HTTP/2's malformed input is h2-malformed-frames",
    **dict.fromkeys(WEBSOCKET_CHECKS, "WebSocket over HTTP/2 (RFC 8441) is not in the contract"),
    **WORKLOADS_NOT_OVER_H2,
}


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
            checks[name] = _known_deviation(framework, name, checks[name], reason)
    return checks


# The checks of robustness rules (harness.verify.severity): what they find bent is a
# deviation, and their failures (a server that stops serving) are failures, declared or
# not. The other checks judge the answers a case measures.
ROBUSTNESS_CHECKS = frozenset(
    {
        "malformed",
        "ws-raw-frames",
        "h2-malformed-frames",
        *ATTACKS,
        "tls-1.2-refused",
        "tls-not-a-hello",
        "tls-half-handshake",
        "tls-plaintext",
    }
)


# The route whose answers each answer check judges; None: a request no scenario sends
# (an unknown path, a method a route does not take). A case fails on a wrong answer only
# on the route its scenario measures; a wrong answer elsewhere is a deviation (a warning,
# a failure with --strict-verify) keyed by the check's name (`measured_checks`).
ANSWER_CHECK_ROUTES: dict[str, str | None] = {
    "text": contract.ROUTE_TEXT,
    "sequential-latency": contract.ROUTE_TEXT,
    "counter": contract.ROUTE_COUNTER,
    "log": contract.ROUTE_LOG,
    "not-found": None,
    "wrong-method": None,
    **WORKLOAD_CHECK_ROUTES,
    **{
        name: contract.ROUTE_WEBSOCKET for name in WEBSOCKET_CHECKS if name not in ROBUSTNESS_CHECKS
    },
}


def _off_route(name: str, check: CheckFunction) -> CheckFunction:
    """`check` of a route the case does not measure: its wrong answer is a deviation
    (key: the check's name), not a failure; a server that stops serving still fails."""

    def judged(server: EndpointOrUrl) -> str | Outcome:
        try:
            return check(server)
        except CheckFailed as failure:
            deviation = Deviation(name, name, failure.sent, failure.expected, failure.came)
            return Outcome(f"a wrong answer off the route measured: {failure.came}", (deviation,))

    return judged


def measured_checks(checks: dict[str, CheckFunction], route: str) -> dict[str, CheckFunction]:
    """`checks` for a case that measures `route`: the answer checks of other routes (and
    of requests no scenario sends) record a wrong answer as a deviation instead of failing
    the case; the checks of `route`, the robustness and protocol checks are as they are."""
    return {
        name: _off_route(name, check)
        if name in ANSWER_CHECK_ROUTES and ANSWER_CHECK_ROUTES[name] != route
        else check
        for name, check in checks.items()
    }


def _known_deviation(framework: str, name: str, check: CheckFunction, reason: str) -> CheckFunction:
    """A check a server declares by name in its `deviations`, for `reason` (not ours to
    fix): every deviation it finds is declared; a check of answers (not in
    ROBUSTNESS_CHECKS) that fails is recorded as a declared deviation, not failed. A check
    that holds with nothing to declare fails: drop the entry."""

    def deviating(server: EndpointOrUrl) -> str | Outcome:
        try:
            said = check(server)
        except CheckFailed as failure:
            if name in ROBUSTNESS_CHECKS:  # a server that stops serving is no deviation
                raise
            deviation = Deviation(name, name, failure.sent, failure.expected, failure.came, reason)
            return Outcome(f"known deviation: {reason} (seen: {failure.came})", (deviation,))
        if isinstance(said, Outcome) and said.deviations:  # the check's own: now declared
            declared = tuple(dataclasses.replace(d, declared=reason) for d in said.deviations)
            return Outcome(f"{said.detail} (known deviation: {reason})", declared)
        raise CheckFailed(
            sent=f"what the {name} check sends",
            expected=f"the deviation it declares ({reason})",
            came=f"the contract's answers ({said if isinstance(said, str) else said.detail})",
            remedy=stale_remedy(name, framework),
        )

    return deviating


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


def run_checks(server: EndpointOrUrl, checks: dict[str, CheckFunction]) -> tuple[Check, ...]:
    """Run every check against the server (an Endpoint, or a cleartext base URL); a
    failing one never stops the rest. A check that returns an Outcome held with the
    deviations it carries."""
    results = []
    for name, check in checks.items():
        try:
            said = check(server)
            if isinstance(said, Outcome):
                check = Check(name, True, said.detail, deviations=said.deviations)
                results.append(dataclasses.replace(check, figures=dict(said.figures)))
            else:
                results.append(Check(name, True, said))
        except CheckFailed as failure:
            results.append(Check(name, False, str(failure), figures=failure.figures))
        except (
            httpx.HTTPError,
            WebSocketException,
            H2Error,
            OSError,
            ValueError,
            AssertionError,
        ) as error:
            results.append(Check(name, False, raised_line(error)))
    return tuple(results)


# How much of a client library's error message a failure's line keeps.
ERROR_CHARS = 200


def raised_line(error: BaseException) -> str:
    """A check stopped by a client library's error (a refused connection, a timeout), as
    one line: what came (the message cut at ERROR_CHARS, with `…`), and the remedy."""
    said = one_line(str(error))
    if len(said) > ERROR_CHARS:
        said = said[:ERROR_CHARS] + "…"
    came = f"{type(error).__name__}: {said}" if said else type(error).__name__
    return f"came {came} (the check stopped there); {FAILURE_REMEDY}"


def check_telemetry(lines: list[dict[str, object]]) -> Check:
    """The server's telemetry lines: at least one, the last with every contract field."""
    if not lines:
        return Check("telemetry", False, "no telemetry line")
    missing = set(contract.TELEMETRY_FIELDS) - set(lines[-1])
    if missing:
        return Check("telemetry", False, f"missing fields {sorted(missing)}")
    return Check("telemetry", True, f"{len(lines)} lines, every field present")


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
    with store, contextlib.ExitStack() as stack:
        if protocol in contract.TLS_PROTOCOLS and certificates is None:
            holder, certificates = temporary_certificates()
            stack.enter_context(holder)
        args = store.server_args()
        if backends is not None:
            if sink == "mongo":  # one --mongo-url: GridFS goes into the sink's database too
                backends.load_gridfs_into(str(store.mongo_url), mongo_db)
            args += backends.server_args(args)
        if client_timeout_s is not None and info.telemetry:  # a contract server's option
            args += ["--client-timeout-s", str(client_timeout_s)]
            head_timeout_s = client_timeout_s
        try:
            server = start_server(
                framework,
                sink=sink,
                cpus=cpus,
                extra_args=args,
                protocol=protocol,
                certificates=certificates,
            )
        except Exception as error:  # a server that cannot start is a failed verification
            return Verification(framework, sink, error=str(error), protocol=protocol)
        try:
            if on_trial(info, protocol):  # a command that did not declare it: probed first
                why_not = trial_finding(framework, protocol, server.host, server.port, certificates)
                if why_not is not None:
                    return Verification(framework, sink, skipped=why_not, protocol=protocol)
            endpoint = endpoint_for(server.url, protocol, certificates)
            routes = None if info.routes is not None else served_routes(endpoint, backends)
            checks = run_checks(endpoint, checks_for(framework, routes, protocol, head_timeout_s))
            if sink != "empty":
                checks += run_checks(
                    endpoint, {"sink-record": lambda url: check_sink_record(url, store)}
                )
            if backends is not None:
                lines = server.telemetry_lines()
                mc_port = int(lines[0].get("mc_port") or 0) if lines else 0
                checks += run_checks(
                    endpoint,
                    served_backend_checks(framework, backends.fileset, mc_port, routes),
                )
            checks += not_supported(
                framework, backends=backends is not None, routes=routes, protocol=protocol
            )
        finally:
            status = server.stop()
    stopped = Check("sigterm", *stopped_cleanly(status, info.telemetry))
    telemetry = (
        check_telemetry(server.telemetry_lines())
        if info.telemetry
        else Check("telemetry", True, NO_TELEMETRY, supported=False)
    )
    return Verification(framework, sink, (*checks, telemetry, stopped), protocol=protocol)


NO_TELEMETRY = "not supported (a server run as a command writes no telemetry line)"


def stopped_cleanly(status: int, contract_server: bool) -> tuple[bool, str]:
    """Whether an exit status after SIGTERM is a clean stop, and how it reads. Ours exit 0
    (the contract); a server run as a command may also end by the SIGTERM itself once
    it has shut down (uvicorn re-raises it), which `stop` saw within the grace."""
    if status == 0:
        return True, "exit status 0"
    if not contract_server and status == -signal.SIGTERM:
        return True, f"exit status {status}: ended by the SIGTERM, within the grace"
    return False, f"exit status {status}"

"""The probe and verify phases (harness.run.pipeline): what the started server
negotiates, read by one probe connection, and the routes a command serves; then the
contract's checks over the case's protocol.

The probe's finding is the case's `negotiated` and its `protocol` verify entry: a TLS
handshake that fails, or an h2 server that does not select ALPN h2, fails the case, but
for a command on trial for h2 or h2c (it did not declare its protocols:
harness.negotiation), which is skipped with what the probe found. A command's route
that answers 404 skips the case (`not supported`), as for a baseline.
"""

from __future__ import annotations

from typing import Any

from drivers import driver_class
from harness.negotiation import not_negotiated, on_trial
from harness.run.case_state import CaseState
from harness.run.context import CaseContext
from harness.run.pipeline import CaseEnd
from harness.tls import h2c_answers, probe_tls
from harness.topology import Topology
from harness.verify import (
    H2_PROTOCOLS,
    WEBSOCKET_CHECKS,
    CheckFunction,
    Routes,
    check_text_route,
    checks_for,
    endpoint_for,
    measured_checks,
    not_supported,
    run_checks,
    served_routes,
    strictly,
)
from harness.verify.h2_attacks import ATTACKS
from model.results import Negotiated
from model.scenarios import Scenario
from servers import FRAMEWORKS
from servers.contract import ALPN_FOR_PROTOCOL, PROTOCOL_H1, PROTOCOL_H2, TLS_PROTOCOLS

# what a run's verify leaves to `harness verify --protocol`: it waits out the server's head
# deadline (10 s) for a half-sent ClientHello, a slow-client property, not an answer's; the
# HTTP/2 attacks take seconds each and load the server's CPU just before it is measured
RUN_VERIFY_LEFT_OUT = ("tls-half-handshake", *ATTACKS)


def probe(state: CaseState) -> CaseEnd | None:
    """What the server negotiates (checked whether or not the run verifies), and the
    routes a command serves (probed now it runs)."""
    ctx, run, server, framework = state.context, state.run, state.topology, state.framework
    state.negotiated, state.protocol_check = probe_protocol(ctx, server)
    check = state.protocol_check
    if check is not None and not check["ok"]:
        state.verify = {"protocol": check}
        if on_trial(FRAMEWORKS[framework], ctx.protocol):  # not declared: not spoken
            host, port, certificates = server.host, server.port, run.certificates
            finding = not_negotiated(framework, ctx.protocol, host, port, certificates)
            return CaseEnd("probe", "skipped", f"not supported: {finding}")
        return CaseEnd("probe", "failed", f"verify failed: protocol: {check['detail']}")
    if FRAMEWORKS[framework].routes is None:  # a command's: probed now it runs
        endpoint = endpoint_for(server.instance_url, ctx.protocol, run.certificates)
        state.routes = served_routes(endpoint, run.backends)
        if run.scenario.route not in state.routes:
            how = "refuses the handshake" if run.scenario.websocket else "answers 404"
            return CaseEnd(
                "probe", "skipped", f"not supported: {framework} {how} on {run.scenario.route}"
            )
    return None


def verify(state: CaseState) -> CaseEnd | None:
    """The contract on the (first) instance, reached over the case's protocol; behind a
    balancer, also that the balancer passes GET / through (per-instance counters and
    proxied WebSocket closes are not the contract's to judge through nginx)."""
    ctx, run, server, framework = state.context, state.run, state.topology, state.framework
    if state.protocol_check is not None:
        state.verify = {"protocol": state.protocol_check}
    if not run.plan.verify:
        return None
    endpoint = endpoint_for(server.instance_url, ctx.protocol, run.certificates)
    routes = state.routes
    wanted = case_checks(framework, routes, ctx.protocol, run.scenario)
    checks = run_checks(endpoint, wanted)
    if run.plan.strict_verify or ctx.profile.strict_verify:  # every warning fails
        checks = strictly(checks, framework)
    if server.balancer is not None:
        checks += run_checks(server.url, {"balancer": check_text_route})
    if routes is not None or ctx.protocol in H2_PROTOCOLS:  # not served, said so
        checks += not_supported(framework, routes=routes, protocol=ctx.protocol)
    state.verify |= {c.name: c.record() for c in checks}
    if any(not c.ok for c in checks):
        details = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
        return CaseEnd("verify", "failed", f"verify failed: {details}")
    return None


def probe_protocol(
    ctx: CaseContext, server: Topology
) -> tuple[Negotiated | None, dict[str, Any] | None]:
    """What the started server negotiates, read by one probe connection, and the case's
    `protocol` verify entry (None, None for h1: nothing to negotiate). TLS: the handshake
    trusting the run's CA, and for h2 the ALPN h2 selected; h2c: SETTINGS after the
    preface. Whether the load generator verifies the certificate is its driver's word
    (the class attribute `ca_trusted`; None when it does not say)."""
    protocol = ctx.protocol
    if protocol == PROTOCOL_H1:
        return None, None
    if protocol not in TLS_PROTOCOLS:
        answered = h2c_answers(server.host, server.port)
        detail = "SETTINGS after the h2 preface" if answered else "no SETTINGS after the preface"
        return Negotiated(protocol), {"ok": answered, "detail": f"{protocol}: {detail}"}
    certificates = ctx.run.certificates
    if certificates is None:
        return None, {"ok": False, "detail": f"{protocol} without the run's certificates"}
    try:
        facts = probe_tls(server.host, server.port, protocol, certificates)
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
        return None, {"ok": False, "detail": f"TLS handshake failed: {error}"}
    ca_trusted = getattr(driver_class(ctx.profile.driver), "ca_trusted", None)
    negotiated = Negotiated(
        protocol,
        tls_version=facts["version"],
        cipher=facts["cipher"],
        key_type=facts["key_type"],
        alpn=facts["alpn"],
        ca_trusted=ca_trusted if isinstance(ca_trusted, bool) else None,
    )
    detail = f"{facts['version']}, {facts['cipher']}, {facts['key_type']}, ALPN {facts['alpn']}"
    expected = ALPN_FOR_PROTOCOL[protocol]
    # h1-tls without ALPN is HTTP/1.1 still (RFC 7301: the default); h2 is not
    if facts["alpn"] != expected and (protocol == PROTOCOL_H2 or facts["alpn"] is not None):
        return negotiated, {"ok": False, "detail": f"{detail}: ALPN {expected} not selected"}
    return negotiated, {"ok": True, "detail": detail}


def case_checks(
    framework: str, routes: Routes | None, protocol: str, scenario: Scenario
) -> dict[str, CheckFunction]:
    """The verify checks of a case: the contract's over its protocol (harness.verify's
    `checks_for`) but RUN_VERIFY_LEFT_OUT; over a protocol other than h1, the WebSocket
    rules only for a WebSocket scenario (an HTTP scenario's load over TLS or HTTP/2 never
    opens /ws; `harness verify --protocol` checks them there). A wrong answer fails the
    case only on the route its scenario measures; elsewhere it is a deviation
    (`measured_checks`)."""
    checks = checks_for(framework, routes, protocol=protocol)
    if protocol != PROTOCOL_H1 and not scenario.websocket:
        checks = {name: check for name, check in checks.items() if name not in WEBSOCKET_CHECKS}
    kept = {name: check for name, check in checks.items() if name not in RUN_VERIFY_LEFT_OUT}
    return measured_checks(kept, scenario.route)

"""How a check's wrong answer is judged: a failure of the case, or a deviation.

Robustness checks (`ROBUSTNESS_CHECKS`) judge rules a server may bend: what they find
bent is a deviation, and a server that stops serving fails them, declared or not. Answer
checks judge what a scenario measures: a wrong answer fails a case only on the route its
scenario measures (`ANSWER_CHECK_ROUTES`, `measured_checks`); elsewhere it is a deviation
keyed by the check's name. A server may declare a check by name in its `deviations`
(`known_deviation`): what the check finds is then declared, not a warning.
"""

from __future__ import annotations

import dataclasses

from harness.verify.endpoint import CheckFunction, EndpointOrUrl
from harness.verify.failure import CheckFailed
from harness.verify.h2_attacks import ATTACKS
from harness.verify.severity import Deviation, Outcome, stale_remedy
from harness.verify.websocket import WEBSOCKET_CHECKS
from harness.verify.workloads import WORKLOAD_CHECK_ROUTES
from servers import contract

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


def known_deviation(framework: str, name: str, check: CheckFunction, reason: str) -> CheckFunction:
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

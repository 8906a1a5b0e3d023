"""The wire contract on every registered server, baselines included: `harness verify`'s
checks (the one contract checker) over each server × the routes it serves.

The boards' workloads' checks (`/json`, `/plaintext` pipelined, `/delay`, `/upload`,
`/json-comp`, `/body/10k`) need no backend: they run in a matrix of their own
(`test_workload_conformance`), each server started once without backends, so they run
where FerretDB and memcached are not installed too.

One test id per server and check (`test_conformance[nginx-files-escapes]`), so a failure
names both. Each server is started once, with every backend, and shared by its checks.
Over every other protocol a server speaks (h1-tls, h2, h2c), the checks of that protocol
run too (`test_conformance_over_protocol[nginx-h2-h2-settings]`), each server started once
per protocol, without backends (the backend routes are judged in cleartext above, and by
`harness verify --protocol`), serving one throwaway certificate.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from harness.services.backends import Backends
from harness.tls import Certificates, make_certificates
from harness.verify import (
    WORKLOAD_CHECKS,
    CheckFailed,
    checks_for,
    contract_check_names,
    contract_checks,
    endpoint_for,
)
from harness.verify.h2_attacks import ATTACKS
from servers import FRAMEWORKS, contract
from tests.helpers import mc_port, require_framework

MATRIX = [
    (name, check)
    for name in FRAMEWORKS
    for check in contract_check_names(name)
    if check not in WORKLOAD_CHECKS
]
WORKLOAD_MATRIX = [
    (name, check)
    for name in FRAMEWORKS
    for check in contract_check_names(name)
    if check in WORKLOAD_CHECKS
]


class OneServerAtATime:
    """Starts the server a test asks for, stopping the one before (the matrix is ordered by
    server, so each starts once). Parametrising a module-scoped fixture by (server, check)
    pairs would restart it for every check."""

    def __init__(self, backends: Backends | None) -> None:
        self.backends = backends
        self.current: ServerProcess | None = None

    def get(self, name: str) -> ServerProcess:
        if self.current is not None and self.current.framework != name:
            self.stop()
        if self.current is None:
            require_framework(name)
            args = self.backends.server_args([]) if self.backends is not None else []
            self.current = start_server(name, extra_args=args)
        return self.current

    def stop(self) -> None:
        server, self.current = self.current, None
        if server is not None:
            status = server.stop()
            assert status == 0, f"{server.framework} exited {status}: {server.stderr_tail()}"


@pytest.fixture(scope="module")
def servers(backends: Backends) -> Iterator[OneServerAtATime]:
    pool = OneServerAtATime(backends)
    yield pool
    pool.stop()


@pytest.fixture(scope="module")
def servers_without_backends() -> Iterator[OneServerAtATime]:
    pool = OneServerAtATime(None)
    yield pool
    pool.stop()


def _run_check(server: ServerProcess, name: str, check: str, checks: dict) -> None:
    try:
        said = checks[check](server.url)
    except CheckFailed as failure:
        pytest.fail(f"{name} {check}: {failure}", pytrace=False)
    # our servers and baselines pass strict: a deviation they do not declare fails here
    warnings = [d.line(name) for d in getattr(said, "deviations", ()) if d.warning]
    if warnings:
        pytest.fail(f"{name} {check}: {'; '.join(warnings)}", pytrace=False)


@pytest.mark.parametrize(("name", "check"), MATRIX, ids=[f"{n}-{c}" for n, c in MATRIX])
def test_conformance(servers: OneServerAtATime, name: str, check: str) -> None:
    server = servers.get(name)
    assert servers.backends is not None
    checks = contract_checks(name, servers.backends.fileset, mc_port(server))
    _run_check(server, name, check, checks)


@pytest.mark.parametrize(
    ("name", "check"), WORKLOAD_MATRIX, ids=[f"{n}-{c}" for n, c in WORKLOAD_MATRIX]
)
def test_workload_conformance(
    servers_without_backends: OneServerAtATime, name: str, check: str
) -> None:
    server = servers_without_backends.get(name)
    _run_check(server, name, check, checks_for(name))


def test_every_server_is_in_the_matrix_with_its_routes() -> None:
    names = {name for name, _ in MATRIX}
    assert names == set(FRAMEWORKS)
    for name, framework in FRAMEWORKS.items():
        checks = {c for n, c in MATRIX if n == name}
        assert "text" in checks and "malformed" in checks
        assert ("ws-1009" in checks) == framework.serves("/ws")
        assert ("files-escapes" in checks) == framework.serves("/files/")
        workloads = {c for n, c in WORKLOAD_MATRIX if n == name}
        assert ("delay" in workloads) == framework.serves(contract.ROUTE_DELAY_PREFIX)
        assert ("pipelined" in workloads) == framework.serves(contract.ROUTE_PLAINTEXT)
        assert ("upload" in workloads) == framework.serves(contract.ROUTE_UPLOAD)


def test_a_workload_route_not_served_says_why() -> None:
    """A builtin server that does not serve one of the boards' workloads says why (verify's
    `not supported (…)`): every server can serve them but for a reason."""
    for name, framework in FRAMEWORKS.items():
        if framework.origin != "builtin":
            continue
        for route in contract.WORKLOAD_ROUTES:
            assert framework.serves(route) or framework.route_notes.get(route), (name, route)


PROTOCOL_MATRIX = [
    (name, protocol, check)
    for name, framework in FRAMEWORKS.items()
    for protocol in framework.protocols
    if protocol != contract.PROTOCOL_H1
    for check in checks_for(name, protocol=protocol)
]
# What these checks found in the servers over a protocol, not fixed yet: each row is
# expected to fail (strict: one that passes fails, so the list cannot go stale), the
# intermittent ones may pass. A Framework's `deviations` cannot say it: they name a check
# on every protocol.
KNOWN_PROTOCOL_FAILURES: dict[tuple[str, str, str], tuple[str, bool]] = {
    **{
        (name, contract.PROTOCOL_H1_TLS, "ws-origin"): (
            "intermittent: after ws-long-message over TLS, a refused handshake got no "
            "response within 5 s (seen once each in full matrix runs; not reproduced alone)",
            False,
        )
        for name in ("gevent", "tornado")
    },
    **{
        ("node-http", protocol, "h2-malformed-frames"): (
            "intermittent: after a PUSH_PROMISE or a WINDOW_UPDATE of 0, node closes the "
            "connection without a GOAWAY the client can read (3 runs in 12 alone, on the "
            "code before and after verify's severities)",
            False,
        )
        for protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C)
    },
}


# Over h1-tls a server parses and routes as in cleartext (judged above): by default only
# the TLS checks, `text` and the WebSocket handshake run there; -m slow runs every route.
# Over h2 and h2c every check runs (the routes take another code path there).
H1_TLS_DEFAULT_ROUTE_CHECKS = {"text", "ws-handshake", "malformed"}


# The half-sent ClientHello waits out the server's default 10 s head deadline, so it runs
# only in the slow run (on every server over every TLS protocol). By default the same close
# is tested at a 1-2 s deadline (--client-timeout-s) on every server: the Python ones in
# test_tls_servers.py (test_unfinished_handshake_is_closed_by_the_head_deadline), the
# baselines in test_baselines_tls.py (test_h1_tls_deadlines_close_a_silent_connection),
# and verify's check itself against Hypercorn in test_verify.py.


def _protocol_param(name: str, protocol: str, check: str) -> object:
    known = KNOWN_PROTOCOL_FAILURES.get((name, protocol, check))
    marks = [pytest.mark.xfail(reason=known[0], strict=known[1])] if known else []
    route_check = not check.startswith(("tls-", "h2-"))
    if (
        protocol == contract.PROTOCOL_H1_TLS
        and route_check
        and check not in H1_TLS_DEFAULT_ROUTE_CHECKS
    ):
        marks.append(pytest.mark.slow)
    if check == "tls-half-handshake" or check in ATTACKS:  # attacks: test_h2_attacks.py
        marks.append(pytest.mark.slow)
    return pytest.param(name, protocol, check, marks=marks, id=f"{name}-{protocol}-{check}")


class OneServerPerProtocol:
    """As OneServerAtATime, for (server, protocol): each started once, on its protocol."""

    def __init__(self, certificates: Certificates) -> None:
        self.certificates = certificates
        self.current: tuple[str, str, ServerProcess] | None = None

    def get(self, name: str, protocol: str) -> ServerProcess:
        if self.current is not None and self.current[:2] != (name, protocol):
            self.stop()
        if self.current is None:
            require_framework(name)
            server = start_server(name, protocol=protocol, certificates=self.certificates)
            self.current = (name, protocol, server)
        return self.current[2]

    def stop(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            name, protocol, server = current
            status = server.stop()
            assert status == 0, f"{name} ({protocol}) exited {status}: {server.stderr_tail()}"


@pytest.fixture(scope="module")
def protocol_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneServerPerProtocol]:
    pool = OneServerPerProtocol(make_certificates(tmp_path_factory.mktemp("tls")))
    yield pool
    pool.stop()


@pytest.mark.parametrize(
    ("name", "protocol", "check"), [_protocol_param(*row) for row in PROTOCOL_MATRIX]
)
def test_conformance_over_protocol(
    protocol_servers: OneServerPerProtocol, name: str, protocol: str, check: str
) -> None:
    server = protocol_servers.get(name, protocol)
    endpoint = endpoint_for(server.url, protocol, protocol_servers.certificates)
    try:
        said = checks_for(name, protocol=protocol)[check](endpoint)
    except CheckFailed as failure:
        pytest.fail(f"{name} over {protocol} {check}: {failure}", pytrace=False)
    # strict here too: a deviation (a robustness rule bent) our servers do not declare fails
    warnings = [d.line(name) for d in getattr(said, "deviations", ()) if d.warning]
    if warnings:
        pytest.fail(f"{name} over {protocol} {check}: {'; '.join(warnings)}", pytrace=False)


def test_every_protocol_a_server_speaks_is_in_the_matrix_with_its_checks() -> None:
    for name, framework in FRAMEWORKS.items():
        for protocol in framework.protocols:
            checks = {c for n, p, c in PROTOCOL_MATRIX if (n, p) == (name, protocol)}
            assert (protocol == contract.PROTOCOL_H1) == (not checks)
            if protocol in contract.TLS_PROTOCOLS:
                assert "tls-handshake" in checks and "tls-half-handshake" in checks
            if protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C):
                assert "h2-malformed-frames" in checks and "malformed" not in checks

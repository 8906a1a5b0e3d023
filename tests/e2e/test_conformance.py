"""The wire contract on every registered server, baselines included: `harness verify`'s
checks (the one contract checker) over each server × the routes it serves.

One test id per server and check (`test_conformance[nginx-files-escapes]`), so a failure
names both. Each server is started once, with every backend, and shared by its checks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.backends import Backends
from harness.server_process import ServerProcess, start_server
from harness.verify import CheckFailed, contract_check_names, contract_checks
from servers import FRAMEWORKS
from tests.helpers import mc_port, require_framework

MATRIX = [(name, check) for name in FRAMEWORKS for check in contract_check_names(name)]


class OneServerAtATime:
    """Starts the server a test asks for, stopping the one before (the matrix is ordered by
    server, so each starts once). Parametrising a module-scoped fixture by (server, check)
    pairs would restart it for every check."""

    def __init__(self, backends: Backends) -> None:
        self.backends = backends
        self.current: ServerProcess | None = None

    def get(self, name: str) -> ServerProcess:
        if self.current is not None and self.current.framework != name:
            self.stop()
        if self.current is None:
            require_framework(name)
            self.current = start_server(name, extra_args=self.backends.server_args([]))
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


@pytest.mark.parametrize(("name", "check"), MATRIX, ids=[f"{n}-{c}" for n, c in MATRIX])
def test_conformance(servers: OneServerAtATime, name: str, check: str) -> None:
    server = servers.get(name)
    checks = contract_checks(name, servers.backends.fileset, mc_port(server))
    try:
        said = checks[check](server.url)
    except CheckFailed as failure:
        pytest.fail(f"{name} {check}: {failure}", pytrace=False)
    # our servers and baselines pass strict: a deviation they do not declare fails here
    warnings = [d.line(name) for d in getattr(said, "deviations", ()) if d.warning]
    if warnings:
        pytest.fail(f"{name} {check}: {'; '.join(warnings)}", pytrace=False)


def test_every_server_is_in_the_matrix_with_its_routes() -> None:
    names = {name for name, _ in MATRIX}
    assert names == set(FRAMEWORKS)
    for name, framework in FRAMEWORKS.items():
        checks = {c for n, c in MATRIX if n == name}
        assert "text" in checks and "malformed" in checks
        assert ("ws-1009" in checks) == framework.serves("/ws")
        assert ("files-escapes" in checks) == framework.serves("/files/")

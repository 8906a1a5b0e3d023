"""The backends under load and failure, on every server that serves `/gridfs` and `/mc`:
concurrent GridFS reads, the memcached pool, long-lived socket-service sessions, and 503s
when a backend is down.

What one request shows (exact bytes, escapes, hits and misses, the socket service's
replies) is checked by harness/verify.py's checks in tests/e2e/test_conformance.py.
Real processes only: the fixtures start FerretDB and memcached.
"""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Iterator

import httpx
import pytest

from harness.backends import Backends
from harness.fileset import FileSet
from harness.server_process import ServerProcess, start_server
from harness.services import Memcached
from model.scenarios import MC_KEY, MC_VALUE
from servers import contract
from tests.helpers import (
    assert_still_serving,
    closed_port,
    mc_port,
    require_framework,
    servers_serving,
)

BACKEND_SERVERS = servers_serving(contract.ROUTE_GRIDFS_PREFIX, contract.ROUTE_MEMCACHED_PREFIX)


@pytest.fixture(params=BACKEND_SERVERS, scope="module")
def framework(request: pytest.FixtureRequest) -> str:
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module")
def backend_server(framework: str, backends: Backends) -> Iterator[ServerProcess]:
    """A server with every backend: files, GridFS, memcached and the socket service."""
    process = start_server(framework, extra_args=backends.server_args([]))
    yield process
    status = process.stop()
    assert status == 0, f"{framework} exited {status}: {process.stderr_tail()}"


def with_addresses(args: list[str], **values: str) -> list[str]:
    """`args` with the values of `--mongo-url`/`--memcached` replaced (keyword: flag name)."""
    flags = {"--" + name.replace("_", "-"): value for name, value in values.items()}
    return [flags.get(args[i - 1], arg) if i else arg for i, arg in enumerate(args)]


# -- /gridfs -----------------------------------------------------------------------------
def test_gridfs_concurrent_reads_are_all_correct(backend_server, fileset) -> None:
    names = fileset.names * 3
    expected = {name: (fileset.directory / name).read_bytes() for name in fileset.names}

    def fetch(name: str) -> bool:
        reply = httpx.get(backend_server.url + contract.ROUTE_GRIDFS_PREFIX + name, timeout=20)
        return reply.status_code == 200 and reply.content == expected[name]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert all(pool.map(fetch, names))


# -- /mc ---------------------------------------------------------------------------------
def memcached_stat(memcached: Memcached, name: str) -> int:
    with socket.create_connection(("127.0.0.1", memcached.port), 5) as sock:
        sock.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += sock.recv(65536)
    for line in data.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == name:
            return int(parts[2])
    raise AssertionError(f"memcached has no stat {name}")


def test_mc_answers_through_a_pool_of_at_most_50_persistent_connections(
    backend_server, memcached
) -> None:
    def fetch(_: int) -> bool:
        with httpx.Client(base_url=backend_server.url, timeout=10) as client:
            return all(
                client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY).content == MC_VALUE
                for _ in range(10)
            )

    before = memcached_stat(memcached, "total_connections")
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        assert all(pool.map(fetch, range(64)))
    middle = memcached_stat(memcached, "total_connections")
    # every stats call above opens one connection of its own
    assert middle - before - 1 <= contract.MC_POOL_SIZE
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        assert all(pool.map(fetch, range(64)))
    after = memcached_stat(memcached, "total_connections")
    assert after - middle - 1 == 0, "the pool's connections are persistent"


# -- the socket service ------------------------------------------------------------------
def read_until(sock: socket.socket, ending: bytes, count: int = 1) -> bytes:
    data = b""
    while data.count(ending) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_proxy_serves_many_long_lived_connections(backend_server) -> None:
    request = b"get " + MC_KEY.encode() + b"\r\n"

    def session(_: int) -> int:
        correct = 0
        with socket.create_connection(("127.0.0.1", mc_port(backend_server)), 10) as sock:
            for _ in range(50):
                sock.sendall(request)
                correct += read_until(sock, b"END\r\n").endswith(MC_VALUE + b"\r\nEND\r\n")
        return correct

    with concurrent.futures.ThreadPoolExecutor(100) as pool:
        assert sum(pool.map(session, range(100))) == 100 * 50


# -- backends that are down --------------------------------------------------------------
def test_backends_down_answer_503_and_the_server_keeps_serving(
    framework: str, backends: Backends, fileset: FileSet
) -> None:
    args = with_addresses(
        backends.server_args([]),
        mongo_url=f"mongodb://127.0.0.1:{closed_port()}/",
        memcached=f"127.0.0.1:{closed_port()}",
    )
    server = start_server(framework, extra_args=args)
    try:
        name = fileset.names[0]
        with httpx.Client(base_url=server.url, timeout=15) as client:
            assert client.get(contract.ROUTE_GRIDFS_PREFIX + name).status_code == 503
            assert client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY).status_code == 503
            assert client.get(contract.ROUTE_FILES_PREFIX + name).status_code == 200
        with socket.create_connection(("127.0.0.1", mc_port(server)), 10) as sock:
            sock.sendall(b"get " + MC_KEY.encode() + b"\r\n")
            assert read_until(sock, b"\r\n").startswith(b"SERVER_ERROR")
        assert_still_serving(server)
        line = server.wait_telemetry(lambda r: r["backend_errors"] >= 3, timeout_s=5)
        assert line is not None, "backend failures are counted in telemetry"
    finally:
        assert server.stop() == 0

"""`/files`, `/gridfs`, `/mc` and the `--mc-proxy-port` socket service on every full server.

Real processes only: the file set from the harness's generator, FerretDB with that set in
GridFS, and memcached holding seed 001's 100-byte value, all started by the fixtures.
"""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.fileset import FileSet
from harness.server_process import ServerProcess, start_server
from harness.services import Memcached
from model.scenarios import MC_KEY, MC_VALUE
from servers import contract, static
from tests.helpers import assert_still_serving, raw_exchange

SECRET = b"outside the files directory"
# Escapes tried on every server that serves /files (tests/test_baselines.py too).
TRAVERSALS = [
    "/files/../secret.txt",
    "/files/..%2fsecret.txt",
    "/files/%2e%2e%2fsecret.txt",
    "/files/%2E%2E/secret.txt",
    "/files/..%5csecret.txt",
    "/files/link.txt",  # a symlink inside the directory pointing outside it
    "/files/",
    "/files/.",
    "/files/%00secret.txt",
]


@pytest.fixture(scope="module")
def backend_server(
    framework: str, fileset: FileSet, gridfs_url: str, memcached: Memcached
) -> Iterator[ServerProcess]:
    """A server with every backend: files, GridFS, memcached and the socket service."""
    secret = fileset.directory.parent / "secret.txt"
    secret.write_bytes(SECRET)
    link = fileset.directory / "link.txt"
    if not link.is_symlink():
        link.symlink_to(secret)
    process = start_server(
        framework,
        extra_args=[
            "--files-dir", str(fileset.directory),
            "--mongo-url", gridfs_url,
            "--memcached", memcached.address,
            "--mc-proxy-port", "0",
        ],
    )  # fmt: skip
    yield process
    status = process.stop()
    assert status == 0, f"{framework} exited {status}: {process.stderr_tail()}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status_of(port: int, target: str) -> int:
    """The status code a raw request line gets (no client-side path normalisation)."""
    reply = raw_exchange(
        port, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
    assert reply.startswith(b"HTTP/1."), reply[:100]
    assert SECRET not in reply
    return int(reply.split(b" ", 2)[1])


def one_of_each_kind(fileset: FileSet) -> list[str]:
    picked: dict[str, str] = {}
    for name in fileset.names:
        picked.setdefault(Path(name).suffix, name)
    return sorted(picked.values())


# -- /files ------------------------------------------------------------------------------
def test_files_serves_exact_bytes_with_type_and_length(backend_server, fileset) -> None:
    names = one_of_each_kind(fileset)
    assert len(names) == 3  # the set mixes jpg, png and gif
    with httpx.Client(base_url=backend_server.url, timeout=5) as client:
        for name in names + fileset.names[:10]:
            reply = client.get(contract.ROUTE_FILES_PREFIX + name)
            assert reply.status_code == 200, name
            assert reply.content == (fileset.directory / name).read_bytes()
            assert int(reply.headers["content-length"]) == len(reply.content)
            assert reply.headers["content-type"].split(";")[0] == static.content_type(name)


def test_files_missing_is_404(backend_server) -> None:
    reply = httpx.get(backend_server.url + contract.ROUTE_FILES_PREFIX + "img-99999.jpg", timeout=5)
    assert reply.status_code == 404


@pytest.mark.parametrize("target", TRAVERSALS)
def test_files_never_escape_the_directory(backend_server, target: str) -> None:
    assert status_of(backend_server.port, target) == 404


def test_files_absolute_paths_are_404(backend_server, fileset) -> None:
    absolute = str(fileset.directory.parent / "secret.txt")
    assert status_of(backend_server.port, "/files/" + absolute) == 404
    encoded = absolute.replace("/", "%2f")
    assert status_of(backend_server.port, "/files/" + encoded) == 404
    assert_still_serving(backend_server)


# -- /gridfs -----------------------------------------------------------------------------
def test_gridfs_serves_the_same_bytes(backend_server, fileset) -> None:
    with httpx.Client(base_url=backend_server.url, timeout=10) as client:
        for name in one_of_each_kind(fileset) + fileset.names[:10]:
            reply = client.get(contract.ROUTE_GRIDFS_PREFIX + name)
            assert reply.status_code == 200, name
            assert reply.content == (fileset.directory / name).read_bytes()
            assert int(reply.headers["content-length"]) == len(reply.content)
            assert reply.headers["content-type"].split(";")[0] == static.content_type(name)


@pytest.mark.parametrize("target", ["/gridfs/img-99999.jpg", "/gridfs/..%2fsecret.txt", "/gridfs/"])
def test_gridfs_missing_or_invalid_is_404(backend_server, target: str) -> None:
    assert status_of(backend_server.port, target) == 404


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


def test_mc_hit_miss_and_bad_key(backend_server) -> None:
    with httpx.Client(base_url=backend_server.url, timeout=5) as client:
        hit = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        assert hit.status_code == 200 and hit.content == MC_VALUE
        assert int(hit.headers["content-length"]) == contract.MC_VALUE_BYTES
        assert client.get(contract.ROUTE_MEMCACHED_PREFIX + "no-such-key").status_code == 404
        too_long = "k" * (contract.MC_MAX_KEY_BYTES + 1)
        assert client.get(contract.ROUTE_MEMCACHED_PREFIX + too_long).status_code == 404


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
def mc_port(server: ServerProcess) -> int:
    port = server.telemetry_lines()[0]["mc_port"]
    assert port > 0
    return port


def read_until(sock: socket.socket, ending: bytes, count: int = 1) -> bytes:
    data = b""
    while data.count(ending) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_proxy_get_hit_miss_pipelined_and_errors(backend_server) -> None:
    hit = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (MC_KEY.encode(), len(MC_VALUE), MC_VALUE)
    with socket.create_connection(("127.0.0.1", mc_port(backend_server)), 5) as sock:
        sock.sendall(b"get " + MC_KEY.encode() + b"\r\n")
        assert read_until(sock, b"END\r\n") == hit
        sock.sendall(b"get nothing-here\r\n")
        assert read_until(sock, b"END\r\n") == b"END\r\n"
        sock.sendall(
            b"get "
            + MC_KEY.encode()
            + b"\r\n" * 1
            + b"get nothing-here\r\n"
            + (b"get " + MC_KEY.encode() + b"\r\n")
        )
        assert read_until(sock, b"END\r\n", 3) == hit + b"END\r\n" + hit
        sock.sendall(b"set x 0 0 1\r\n")
        assert read_until(sock, b"\r\n") == b"ERROR\r\n"
        sock.sendall(b"quit\r\n")
        assert sock.recv(100) == b""


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
def test_backends_down_answer_503_and_the_server_keeps_serving(framework, fileset) -> None:
    server = start_server(
        framework,
        extra_args=[
            "--files-dir", str(fileset.directory),
            "--mongo-url", f"mongodb://127.0.0.1:{closed_port()}/",
            "--memcached", f"127.0.0.1:{closed_port()}",
            "--mc-proxy-port", "0",
        ],
    )  # fmt: skip
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

"""The backends under load and failure, on every server that serves `/gridfs` and `/mc`:
concurrent GridFS reads, the memcached pool, long-lived socket-service sessions, and 503s
when a backend is down.

What one request shows (exact bytes, escapes, hits and misses, the socket service's
replies) is checked by harness/verify/'s checks in tests/e2e/test_conformance.py.
Real processes only: the fixtures start FerretDB and memcached.
"""

from __future__ import annotations

import concurrent.futures
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.server_process import ServerProcess, start_server
from harness.services.backends import Backends
from harness.services.fileset import FileSet
from harness.services.memcached import Memcached
from model.scenarios import MC_KEY, MC_VALUE
from servers import contract
from servers.core import static
from tests.helpers import (
    assert_still_serving,
    closed_port,
    mc_port,
    one_per_runtime,
    require_framework,
    servers_serving,
)

BACKEND_SERVERS = servers_serving(contract.ROUTE_GRIDFS_PREFIX, contract.ROUTE_MEMCACHED_PREFIX)


@pytest.fixture(params=one_per_runtime(BACKEND_SERVERS), scope="module")
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


def test_a_stock_gridfs_bucket_reads_every_file_the_harness_loaded(
    backends: Backends, fileset: FileSet
) -> None:
    """The spec's layout: pymongo's GridFSBucket with its defaults finds every file by name,
    byte-exact, with its content type; the ids are the bucket's own, not chosen names."""
    from bson import ObjectId
    from gridfs import GridFSBucket
    from pymongo import MongoClient

    client: Any = MongoClient(backends.mongo_url, serverSelectionTimeoutMS=5000)
    try:
        database = client[backends.mongo_db]
        bucket = GridFSBucket(database)
        for name in fileset.names:
            grid_out = bucket.open_download_stream_by_name(name)
            assert grid_out.read() == (fileset.directory / name).read_bytes(), name
            assert grid_out.metadata == {"contentType": static.content_type(name)}
        files = list(database["fs.files"].find())
        assert sorted(document["filename"] for document in files) == sorted(fileset.names)
        for document in files:
            assert {"_id", "filename", "length", "chunkSize", "uploadDate"} <= set(document)
            assert isinstance(document["_id"], ObjectId)
        chunk = database["fs.chunks"].find_one({"files_id": files[0]["_id"], "n": 0})
        assert chunk is not None and {"files_id", "n", "data"} <= set(chunk)
    finally:
        client.close()


def test_gridfs_answers_404_for_a_missing_file_and_503_for_a_corrupt_one(
    framework: str, backends: Backends
) -> None:
    """A database of its own holding one whole file and one whose chunk is gone: 200, 503
    (counted in backend_errors) and 404 for a name GridFS does not have."""
    from gridfs import GridFSBucket
    from pymongo import MongoClient

    database_name = "gridfs_corrupt"
    whole, corrupt, data = "img-whole.png", "img-corrupt.jpg", b"\x89PNG\r\n\x1a\n" + b"x" * 5000
    client: Any = MongoClient(backends.mongo_url, serverSelectionTimeoutMS=5000)
    try:
        database = client[database_name]
        if database["fs.files"].find_one({"filename": whole}) is None:  # once per session
            bucket = GridFSBucket(database)
            bucket.upload_from_stream(whole, data, metadata={"contentType": "image/png"})
            corrupt_id = bucket.upload_from_stream(corrupt, data)
            database["fs.chunks"].delete_many({"files_id": corrupt_id})
    finally:
        client.close()
    args = [*backends.server_args([]), "--mongo-db", database_name]  # the last one counts
    with start_server(framework, extra_args=args) as server:
        with httpx.Client(base_url=server.url, timeout=15) as http:
            reply = http.get(contract.ROUTE_GRIDFS_PREFIX + whole)
            assert (reply.status_code, reply.content) == (200, data)
            assert reply.headers["content-type"].split(";")[0] == "image/png"
            assert http.get(contract.ROUTE_GRIDFS_PREFIX + corrupt).status_code == 503
            assert http.get(contract.ROUTE_GRIDFS_PREFIX + "img-none.jpg").status_code == 404
        assert server.wait_telemetry(lambda t: t["backend_errors"] == 1)


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

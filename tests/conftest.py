"""Fixtures: real server processes on OS-chosen loopback ports, one per framework."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.fileset import FileSet, ensure_fileset, load_gridfs
from harness.server_process import ServerProcess, start_server
from harness.services import FerretDB, Memcached
from model.scenarios import MC_KEY, MC_VALUE
from servers import full_contract_servers
from tests.helpers import require_framework, require_tool

TEST_FILE_COUNT = 40


@pytest.fixture(params=full_contract_servers(), scope="module")
def framework(request: pytest.FixtureRequest) -> str:
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module")
def server(framework: str) -> Iterator[ServerProcess]:
    """One running server per framework, shared by a module's read-only tests."""
    process = start_server(framework)
    yield process
    status = process.stop()
    assert status == 0, f"{framework} exited {status}: {process.stderr_tail()}"


# -- services shared by the whole session: started here, always stopped ------------------
@pytest.fixture(scope="session")
def fileset() -> Iterator[FileSet]:
    """A small deterministic file set (the generator's own, seed 4) in a temporary dir."""
    with tempfile.TemporaryDirectory(prefix="harness-files-") as directory:
        yield ensure_fileset(TEST_FILE_COUNT, 4, Path(directory) / "files")


@pytest.fixture(scope="session")
def ferretdb() -> Iterator[FerretDB]:
    require_tool("ferretdb")
    with (
        tempfile.TemporaryDirectory(prefix="harness-ferretdb-") as data,
        FerretDB(Path(data)) as db,
    ):
        yield db


@pytest.fixture(scope="session")
def gridfs_url(ferretdb: FerretDB, fileset: FileSet) -> str:
    """FerretDB's URL with the test file set loaded into GridFS."""
    load_gridfs(ferretdb.url, fileset)
    return ferretdb.url


@pytest.fixture(scope="session")
def memcached() -> Iterator[Memcached]:
    require_tool("memcached")
    with Memcached() as service:
        service.set(MC_KEY, MC_VALUE)
        yield service

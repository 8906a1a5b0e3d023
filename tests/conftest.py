"""Fixtures: real server processes on OS-chosen loopback ports, and the backends they read.

Helpers that are not fixtures live in tests/helpers.py.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.services.backends import KINDS, Backends
from harness.services.ferretdb import FerretDB
from harness.services.fileset import FileSet, ensure_fileset
from harness.services.memcached import Memcached
from harness.verify import plant_escape_bait
from tests.helpers import require_tool

TEST_FILE_COUNT = 40
TEST_FILE_SEED = 4


# -- services shared by the whole session: started here, always stopped ------------------
@pytest.fixture(scope="session")
def fileset() -> Iterator[FileSet]:
    """A small deterministic file set (the generator's own, seed 4) in a temporary dir."""
    with tempfile.TemporaryDirectory(prefix="harness-files-") as directory:
        yield ensure_fileset(TEST_FILE_COUNT, TEST_FILE_SEED, Path(directory) / "files")


@pytest.fixture(scope="session")
def ferretdb() -> Iterator[FerretDB]:
    require_tool("ferretdb")
    with (
        tempfile.TemporaryDirectory(prefix="harness-ferretdb-") as data,
        FerretDB(Path(data)) as db,
    ):
        yield db


@pytest.fixture(scope="session")
def backends(ferretdb: FerretDB, fileset: FileSet) -> Iterator[Backends]:
    """Every backend a server reads, as `harness verify` starts them: the test file set on
    disk (with the escape bait beside it) and in FerretDB's GridFS, and memcached holding
    the memcached-proxy study's value."""
    require_tool("memcached")
    plant_escape_bait(fileset.directory)
    with Backends(
        KINDS,
        mongo_url=ferretdb.url,
        file_count=TEST_FILE_COUNT,
        seed=TEST_FILE_SEED,
        files_dir=fileset.directory,
    ) as started:
        yield started


@pytest.fixture(scope="session")
def gridfs_url(backends: Backends) -> str:
    """FerretDB's URL with the test file set loaded into GridFS."""
    assert backends.mongo_url is not None
    return backends.mongo_url


@pytest.fixture(scope="session")
def memcached(backends: Backends) -> Memcached:
    """memcached holding MC_KEY → MC_VALUE."""
    assert backends.memcached is not None
    return backends.memcached

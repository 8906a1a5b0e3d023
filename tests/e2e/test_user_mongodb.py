"""`--mongo-url` to a user's MongoDB: the harness writes only to a
database of the run's own (`--mongo-db harness_<time>_<random>`), drops only that one,
and never touches the `harness` database it used to drop collections of.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.server_process import start_server
from harness.services.backends import Backends
from harness.services.ferretdb import FerretDB, new_database_name, own_database
from harness.services.fileset import load_gridfs
from harness.services.sink_store import SinkStore
from model.errors import UserError
from model.results import read_run
from servers import FRAMEWORKS, contract
from tests.helpers import (
    ONE_STEP_SMOKE,
    harness,
    require_ferretdb,
    require_framework,
    require_tools,
)

PLANTED = {"_id": "the user's", "note": "must survive the harness"}
# what the harness used to drop in `harness`: the mongo sink's and the GridFS bucket's
USER_COLLECTIONS = ("records", "fs.files", "fs.chunks", "harness_fileset")


@pytest.fixture
def user_mongodb(tmp_path: Path) -> Any:
    """A FerretDB standing for a user's MongoDB, holding the user's own `harness` data."""
    require_ferretdb()
    from pymongo import MongoClient

    with FerretDB(tmp_path / "user-db") as db:
        client: Any = MongoClient(db.url, serverSelectionTimeoutMS=5000)
        for name in USER_COLLECTIONS:
            client.harness[name].insert_one(dict(PLANTED))
        yield db, client
        client.close()


def _assert_untouched(client: Any) -> None:
    for name in USER_COLLECTIONS:
        assert list(client.harness[name].find()) == [PLANTED], f"harness.{name}"
    leftovers = [n for n in client.list_database_names() if n.startswith("harness_")]
    assert leftovers == []  # the run's own database was dropped after it


def test_a_run_with_mongo_url_keeps_the_users_data(user_mongodb, tmp_path: Path) -> None:
    require_tools("wrk")
    require_framework("aiohttp")
    db, client = user_mongodb
    result = harness(
        "compare",
        "--frameworks",
        "aiohttp",
        "--profile",
        "smoke",
        *ONE_STEP_SMOKE,
        "--scenario",
        "log",
        "--sink",
        "mongo",
        "--mongo-url",
        db.url,
        "--out",
        str(tmp_path / "out"),
        timeout_s=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = list((tmp_path / "out").iterdir())
    [case] = read_run(run_dir).cases
    assert case.status == "ok", case.error
    _assert_untouched(client)


def test_gridfs_goes_into_the_runs_own_database(user_mongodb, tmp_path: Path) -> None:
    db, client = user_mongodb
    name = new_database_name()
    files = tmp_path / "files"
    with (
        own_database(db.url, name),
        Backends(
            ["gridfs"], mongo_url=db.url, mongo_db=name, file_count=5, files_dir=files
        ) as backends,
    ):
        assert backends.loaded_files == 5
        assert client[name]["fs.files"].count_documents({}) == 5
        assert ["--mongo-db", name] == backends.server_args([])[-2:]
    _assert_untouched(client)


def test_a_database_that_exists_already_is_refused(user_mongodb) -> None:
    db, _client = user_mongodb
    with (
        pytest.raises(UserError, match="has a database harness already"),
        own_database(db.url, "harness"),
    ):
        pass
    _assert_untouched(_client)


MONGO_SERVERS = [n for n, f in FRAMEWORKS.items() if "mongo" in f.sinks]


@pytest.mark.parametrize("framework", MONGO_SERVERS)
def test_every_server_writes_and_reads_the_mongo_db_it_is_given(
    framework: str, user_mongodb, fileset
) -> None:
    """`--mongo-db`: the sink's records and the GridFS files are in that database, on every
    runtime (and Node); the `harness` database is not touched."""
    require_framework(framework)
    db, client = user_mongodb
    name = new_database_name()
    load_gridfs(db.url, fileset, database=name)
    with SinkStore("mongo", mongo_url=db.url, mongo_db=name) as store:
        with start_server(framework, sink="mongo", extra_args=store.server_args()) as server:
            assert httpx.post(server.url + contract.ROUTE_LOG, content=b"x", timeout=10).is_success
            if FRAMEWORKS[framework].serves(contract.ROUTE_GRIDFS_PREFIX):
                file = fileset.names[0]
                reply = httpx.get(server.url + contract.ROUTE_GRIDFS_PREFIX + file, timeout=10)
                assert reply.content == (fileset.directory / file).read_bytes()
        assert store.count() == 1
    client.drop_database(name)
    _assert_untouched(client)

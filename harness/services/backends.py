"""What a scenario (or verify) needs beside its sink, started once and always stopped.

- `files`: the seeded image-like file set on disk (`harness.services.fileset`), served from
  `--files-dir`;
- `gridfs`: the same set loaded into GridFS: into the run's database (harness.services.database,
  FerretDB on PostgreSQL with GIN indexes on the fields GridFS reads query), a MongoDB URL
  given, or else a FerretDB on SQLite started here (verify's);
- `memcached`: memcached started here holding the memcached-proxy study's 100-byte value
  under `MC_KEY`,
  and the servers' `--mc-socket-port` socket service turned on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.services.database import HarnessDatabase
from harness.services.ferretdb import FERRETDB_VERSION
from harness.services.fileset import (
    DEFAULT_FILE_COUNT,
    DEFAULT_SEED,
    FileSet,
    Progress,
    ensure_fileset,
    load_gridfs,
)
from harness.services.memcached import Memcached
from model.errors import UserError
from model.scenarios import MC_KEY, MC_VALUE
from model.secrets import redact_url
from servers import contract
from servers.core import gridfs_layout

if TYPE_CHECKING:
    from model.scenarios import Scenario

SLOW_GRIDFS_READ_MS = 20.0  # above this, one GridFS read costs more than serving it
# the fields GridFS reads look documents up by: the servers' layout (by _id) and the
# standard reader (fs.files by filename, fs.chunks by files_id)
GRIDFS_QUERY_FIELDS = {
    gridfs_layout.FILES_COLLECTION: ("_id", "filename"),
    gridfs_layout.CHUNKS_COLLECTION: ("_id", "files_id"),
}


def time_gridfs_read(mongo_url: str, name: str, database_name: str) -> float:
    """Milliseconds to read one file the way the servers do (pymongo's GridFSBucket:
    fs.files by filename, its chunks by files_id sorted by n), with one client already
    connected: tells when the database bounds the gridfs scenario."""
    from gridfs import GridFSBucket
    from pymongo import MongoClient

    client: Any = MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        client.admin.command("ping")  # connected before the clock starts
        bucket = GridFSBucket(client[database_name], contract.GRIDFS_BUCKET)
        started = time.perf_counter()
        gridfs_layout.read_sync(bucket, name)
        return round((time.perf_counter() - started) * 1000.0, 1)
    finally:
        client.close()


KINDS = ("files", "gridfs", "memcached")


class Backends:
    """Running backends (`kinds` of KINDS); a context manager that stops what it started.

    `gridfs` implies the file set on disk too (the URL list and the bytes to compare).
    `mongo_db` is the database the bucket goes into and the servers read (`--mongo-db`):
    one of the run's own (services.own_database) when `mongo_url` is a user's MongoDB.
    `database` is the run's own database (harness.services.database), indexed here once loaded.
    """

    def __init__(
        self,
        kinds: Iterable[str],
        *,
        mongo_url: str | None = None,
        database: HarnessDatabase | None = None,
        mongo_db: str = contract.GRIDFS_DATABASE,
        file_count: int = DEFAULT_FILE_COUNT,
        seed: int = DEFAULT_SEED,
        files_dir: Path | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.kinds = frozenset(kinds)
        unknown = self.kinds - set(KINDS)
        if unknown:
            raise UserError(f"unknown backend {', '.join(sorted(unknown))}")
        self.fileset: FileSet | None = None
        self.mongo_url: str | None = None
        self.mongo_db = mongo_db
        self.memcached: Memcached | None = None
        self.database = database
        self._own_database: HarnessDatabase | None = None
        self.loaded_files = 0
        self.gridfs_read_ms: float | None = None
        try:
            if self.kinds & {"files", "gridfs"}:
                self.fileset = ensure_fileset(file_count, seed, files_dir, progress=progress)
            if "gridfs" in self.kinds:
                assert self.fileset is not None
                if mongo_url is None and self.database is None:
                    self._own_database = self.database = HarnessDatabase("sqlite")
                if mongo_url is None:
                    assert self.database is not None
                    mongo_url = self.database.url
                self.mongo_url = mongo_url
                self.loaded_files = load_gridfs(
                    mongo_url, self.fileset, progress=progress, database=mongo_db
                )
                if self.database is not None and self.loaded_files:
                    for collection, fields in GRIDFS_QUERY_FIELDS.items():
                        self.database.index_fields(mongo_db, collection, fields)
                self.gridfs_read_ms = time_gridfs_read(mongo_url, self.fileset.names[-1], mongo_db)
            if "memcached" in self.kinds:
                self.memcached = Memcached()
                self.memcached.set(MC_KEY, MC_VALUE)
        except BaseException:
            self.close()
            raise

    @classmethod
    def for_scenario(cls, scenario: Scenario, **options: Any) -> Backends:
        """What `scenario` needs (nothing for most)."""
        return cls([scenario.backend] if scenario.backend else [], **options)

    def load_gridfs_into(
        self, mongo_url: str, database: str, harness_database: HarnessDatabase | None = None
    ) -> None:
        """Also load the file set into another database (a mongo sink's own), indexed like
        the first when `harness_database` holds it."""
        if self.fileset is not None:
            loaded = load_gridfs(mongo_url, self.fileset, database=database)
            if harness_database is not None and loaded:
                for collection, fields in GRIDFS_QUERY_FIELDS.items():
                    harness_database.index_fields(database, collection, fields)

    def server_args(self, sink_args: list[str]) -> list[str]:
        """Arguments a server needs for these backends (beside the sink's `sink_args`)."""
        args: list[str] = []
        if self.fileset is not None:
            args += ["--files-dir", str(self.fileset.directory)]
        if self.mongo_url is not None and "--mongo-url" not in sink_args:
            args += ["--mongo-url", self.mongo_url, "--mongo-db", self.mongo_db]
        if self.memcached is not None:
            args += ["--memcached", self.memcached.address, "--mc-socket-port", "0"]
        return args

    def paths(self, scenario: Scenario) -> tuple[str, ...]:
        """The URL paths a random-path scenario picks from (the autobench study's URL list)."""
        if self.fileset is None or not scenario.random_paths:
            return ()
        return tuple(scenario.path + name for name in self.fileset.names)

    def expected_body(self, scenario: Scenario) -> bytes | None:
        """Every reply's body when the scenario checks them."""
        return MC_VALUE if scenario.backend == "memcached" and scenario.check_body else None

    def describe(self) -> dict[str, Any]:
        """What a result records about the backends."""
        described: dict[str, Any] = {"kinds": sorted(self.kinds)}
        if self.fileset is not None:
            described["fileset"] = self.fileset.describe()
        if self.mongo_url is not None:
            described["gridfs"] = {
                "url": redact_url(self.mongo_url),
                "database": self.mongo_db,
                "server": self.database.describe() if self.database else "given",
                "layout": "GridFS spec (fs.files by filename, fs.chunks by files_id, n)",
                "one_file_read_ms": self.gridfs_read_ms,
            }
        if self.memcached is not None:
            described["memcached"] = {
                "address": self.memcached.address,
                "key": MC_KEY,
                "value_bytes": len(MC_VALUE),
                "pool_per_process": contract.MC_POOL_SIZE,
            }
        return described

    def limit_note(self) -> str | None:
        """A warning when the database, not the servers, bounds the GridFS scenario."""
        if self.gridfs_read_ms is None or self.gridfs_read_ms < SLOW_GRIDFS_READ_MS:
            return None
        return (
            f"GridFS is bound by the database: reading one file (fs.files by filename, its "
            f"chunks by files_id, one client) took {self.gridfs_read_ms:.0f} ms here"
            + (
                f" — FerretDB {FERRETDB_VERSION}'s SQLite backend scans the collections for "
                "each lookup; use --mongo-backend postgresql, or --mongo-url for a real MongoDB"
                if self.database is not None and self.database.backend == "sqlite"
                else ""
            )
        )

    def close(self) -> None:
        if self.memcached is not None:
            self.memcached.stop()
            self.memcached = None
        if self._own_database is not None:
            self._own_database.stop()
            self._own_database = None

    def __enter__(self) -> Backends:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

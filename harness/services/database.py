"""The MongoDB-wire database the harness starts itself for the mongo sink and GridFS.

FerretDB v1.24 (harness.services) on one of two backends, `--mongo-backend`:
- `postgresql` (the default when PostgreSQL is installed): a throwaway cluster of the
  run's own (harness.services.postgres) with the settings that make FerretDB's lookups index scans,
  and GIN indexes on the fields the servers query (`index_fields`);
- `sqlite`, the fallback: FerretDB's SQLite backend decodes every document of a
  collection for each lookup (a GridFS read took 417 ms at 10,000 files) and takes about
  900 single inserts a second, so the database, not the framework, is what a mongo-sink
  or GridFS case measures there.
`--mongo-url` names a real MongoDB instead; the harness starts none then.

One database serves a whole run (the runner starts it before the first case and stops it
after the last): starting FerretDB on a fresh cluster takes seconds, and each case starts
from an empty sink collection anyway (SinkStore drops it).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.services import postgres
from harness.services.ferretdb import FERRETDB_VERSION, FerretDB
from model.errors import UserError
from servers import scratch

MONGO_BACKENDS = ("postgresql", "sqlite")
METADATA_TABLE = "_ferretdb_database_metadata"  # FerretDB's: collection name → table name
SQLITE_NOTE = (
    "PostgreSQL is not installed (`harness doctor --install`): FerretDB runs on SQLite, "
    "which bounds the mongo sink near 1,000 inserts/s and GridFS reads at hundreds of ms"
)


def default_backend() -> tuple[str, str | None]:
    """`postgresql` when it is installed, else `sqlite` with a one-line note saying why."""
    if postgres.bin_dir() is not None:
        return "postgresql", None
    return "sqlite", SQLITE_NOTE


def check_backend(name: str) -> str:
    """`name` itself when it is a backend (UserError naming the known ones otherwise)."""
    if name not in MONGO_BACKENDS:
        raise UserError(f"unknown mongo backend {name!r}: choose from {', '.join(MONGO_BACKENDS)}")
    return name


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class HarnessDatabase:
    """FerretDB on `backend` (MONGO_BACKENDS), started at once; a context manager that
    stops both processes and removes their directories (also when starting fails).

    `durable` keeps PostgreSQL's synchronous_commit on (the run's --durable); `cpus` pins
    FerretDB and PostgreSQL with `taskset -c` (--db-cpus).
    """

    def __init__(
        self,
        backend: str,
        *,
        durable: bool = False,
        cpus: str | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.backend = check_backend(backend)
        self.cpus = cpus
        self.postgresql: postgres.PostgreSQL | None = None
        self.ferretdb: FerretDB | None = None
        self.gin_indexes: list[str] = []  # "database.collection: field" for each one made
        self.postgresql_version = postgres.server_version() if backend == "postgresql" else None
        self._tempdir = scratch.temporary_directory("mongo", workdir)
        try:
            if backend == "postgresql":
                self.postgresql = postgres.PostgreSQL(durable=durable, cpus=cpus, workdir=workdir)
            self.ferretdb = FerretDB(
                Path(self._tempdir.name) / "ferretdb",
                postgresql_url=self.postgresql.url if self.postgresql else None,
                cpus=cpus,
            )
        except BaseException:  # Ctrl-C too: nothing left running, no directory left
            self.stop()
            raise

    @property
    def url(self) -> str:
        assert self.ferretdb is not None
        return self.ferretdb.url

    def pids(self) -> list[int]:
        """The database's processes to watch (their children too): FerretDB, and the
        PostgreSQL postmaster whose children are the backends serving FerretDB."""
        pids = []
        if self.ferretdb is not None and self.ferretdb.process.poll() is None:
            pids.append(self.ferretdb.process.pid)
        if self.postgresql is not None:
            pids += self.postgresql.pids()
        return pids

    def table_of(self, database: str, collection: str) -> str | None:
        """The PostgreSQL table FerretDB keeps `collection` of `database` in (None: no
        such collection yet), from FerretDB's own metadata table in the database's schema."""
        assert self.postgresql is not None
        metadata = f"{_identifier(database)}.{METADATA_TABLE}"
        exists = self.postgresql.sql(f"SELECT to_regclass({_literal(metadata)})")
        if not exists:
            return None
        table = self.postgresql.sql(
            f"SELECT _jsonb->>'table' FROM {metadata} WHERE _jsonb->>'_id' = {_literal(collection)}"
        )
        return table or None

    def index_fields(self, database: str, collection: str, fields: Iterable[str]) -> list[str]:
        """GIN indexes on `(_jsonb->'field')` for each of `fields` of an existing collection,
        then ANALYZE; the index names (none on SQLite, which has no such index).

        Why GIN: FerretDB v1.24 pushes an equality filter down as `_jsonb->'field' @> value`;
        its own btree index on the field cannot serve `@>`, a GIN index can (with
        plan_cache_mode = force_custom_plan, harness.services.postgres). Made after the data is in:
        one build is cheaper than keeping the index up to date through the load.
        """
        if self.postgresql is None:
            return []
        table = self.table_of(database, collection)
        if table is None:
            raise UserError(f"FerretDB has no collection {database}.{collection} to index")
        qualified = f"{_identifier(database)}.{_identifier(table)}"
        names = []
        for field in fields:
            name = f"{table}_{field.replace('.', '_')}_gin"[:63]
            self.postgresql.sql(
                f"CREATE INDEX IF NOT EXISTS {_identifier(name)} ON {qualified} "
                f"USING gin ((_jsonb->{_literal(field)}))"
            )
            names.append(name)
            self.gin_indexes.append(f"{database}.{collection}: {field}")
        self.postgresql.sql(f"ANALYZE {qualified}")
        return names

    def describe(self) -> dict[str, Any]:
        """What results record: FerretDB's version, the backend, its version and settings."""
        described: dict[str, Any] = {
            "server": "FerretDB (started by the harness)",
            "ferretdb_version": FERRETDB_VERSION,
            "backend": self.backend,
            "cpus": self.cpus,
        }
        if self.postgresql is not None:
            described["postgresql"] = {
                "version": self.postgresql_version,
                "settings": dict(self.postgresql.settings),
                "gin_indexes": list(self.gin_indexes),
            }
        return described

    def stop(self) -> None:
        """FerretDB first (it holds PostgreSQL's connections), then PostgreSQL, then the
        directories."""
        try:
            if self.ferretdb is not None:
                self.ferretdb.stop()
        finally:
            try:
                if self.postgresql is not None:
                    self.postgresql.stop()
            finally:
                self._tempdir.cleanup()

    def __enter__(self) -> HarnessDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

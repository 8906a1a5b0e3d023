"""The harness's side of a sink: what a server needs to write to it, and what it holds.

`SinkStore` gives a server its sink arguments (a fresh file, or a MongoDB URL: the run's
own database (harness.services.database), a real MongoDB that `--mongo-url` names, or else a
FerretDB on SQLite started for this store alone, as verify does), counts the records
stored, so verify can see a record arrive, and audits them (`audit`: each record parsed,
ids distinct) so the runner can reconcile: nothing lost.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.services.database import HarnessDatabase
from harness.services.ferretdb import FERRETDB_VERSION, known_w0_probe
from model.errors import UserError
from model.secrets import redact_url
from servers import scratch
from servers.contract import MONGO_BATCH_MAX_RECORDS
from servers.core.sinks import MONGO_COLLECTION, MONGO_DATABASE


@dataclass(frozen=True)
class SinkAudit:
    """What a sink holds, record by record: every record parsed and its `id` read."""

    records: int  # lines of the file / documents of the collection
    ids: frozenset[str]  # the distinct ids of the records that parse
    duplicates: int  # records whose id an earlier record already had
    unparseable: int  # lines that are not a JSON object with a string `id` (a torn write)

    @staticmethod
    def of(ids: Iterable[str | None]) -> SinkAudit:
        """The audit of records whose ids are `ids` (None: a record that did not parse)."""
        seen: set[str] = set()
        records = duplicates = unparseable = 0
        for record_id in ids:
            records += 1
            if record_id is None:
                unparseable += 1
            elif record_id in seen:
                duplicates += 1
            else:
                seen.add(record_id)
        return SinkAudit(records, frozenset(seen), duplicates, unparseable)


def record_id(line: bytes) -> str | None:
    """The `id` of one file-sink line, or None when the line is not a whole record."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        return None
    return record["id"]


class SinkStore:
    """One sink's backing store for one server run; a context manager that cleans up."""

    def __init__(self, sink: str, *, mongo_url: str | None = None,
                 database: HarnessDatabase | None = None, mongo_w: int = 1,
                 mongo_db: str = MONGO_DATABASE, workdir: Path | None = None,
                 durable: bool = False,
                 mongo_batch: int = MONGO_BATCH_MAX_RECORDS) -> None:  # fmt: skip
        self.sink = sink
        self.mongo_w = mongo_w
        self.mongo_batch = mongo_batch  # the servers' --mongo-batch (group commit)
        self.mongo_db = mongo_db  # the run's own on a user's MongoDB (services.own_database)
        self.durable = durable  # the server acknowledges records once they are on disk
        self._tempdir = scratch.temporary_directory(f"sink-{sink}", workdir)
        self.path = Path(self._tempdir.name) / "records.jsonl"
        self.database = database  # the harness's own (None: a user's MongoDB)
        self._own_database: HarnessDatabase | None = None
        self._client: Any = None
        self.mongo_url = mongo_url
        self.baseline: SinkAudit | None = None  # what it held before the counted load
        if sink == "mongo":
            try:
                self._open_mongo(mongo_db)
            except BaseException:  # Ctrl-C too: no database or directory left behind
                self.close()
                raise

    def _open_mongo(self, mongo_db: str) -> None:
        if self.mongo_url is None:
            if self.database is None:
                self._own_database = self.database = HarnessDatabase(
                    "sqlite", workdir=Path(self._tempdir.name)
                )
            self.mongo_url = self.database.url
        from pymongo import MongoClient

        self._client = MongoClient(self.mongo_url, serverSelectionTimeoutMS=5000)
        try:
            self._client[mongo_db][MONGO_COLLECTION].drop()
        except Exception as error:
            raise UserError(
                f"MongoDB at {redact_url(self.mongo_url)} is not reachable: {error}"
            ) from None

    def server_args(self) -> list[str]:
        """The server's sink options; `--mongo-url` among them goes into the server's
        environment, not onto its command line (harness.secrets.server_environment)."""
        durable = ["--durable"] if self.durable else []
        if self.sink == "file":
            return ["--sink-path", str(self.path), *durable]
        if self.sink == "mongo":
            return [
                *("--mongo-url", str(self.mongo_url), "--mongo-w", str(self.mongo_w)),
                *("--mongo-db", self.mongo_db, "--mongo-batch", str(self.mongo_batch)),
                *durable,
            ]
        return []

    def count(self) -> int | None:
        """Records the sink holds now (None for the empty sink, which keeps nothing)."""
        if self.sink == "file":
            if not self.path.exists():
                return 0
            with self.path.open("rb") as records:
                return sum(1 for _ in records)
        if self.sink == "mongo":
            return int(self._client[self.mongo_db][MONGO_COLLECTION].count_documents({}))
        return None

    def audit(self) -> SinkAudit | None:
        """Every record parsed and its id read (None for the empty sink)."""
        if self.sink == "file":
            if not self.path.exists():
                return SinkAudit.of(())
            with self.path.open("rb") as lines:
                return SinkAudit.of(record_id(line) for line in lines)
        if self.sink == "mongo":
            found = self._client[self.mongo_db][MONGO_COLLECTION].find({}, {"_id": 0, "id": 1})
            return SinkAudit.of(
                doc["id"] if isinstance(doc.get("id"), str) else None for doc in found
            )
        return None

    def mark_baseline(self) -> int | None:
        """Remember what the sink holds now (the warm-up's and verify's records, not to be
        reconciled); returns how many records that is (None for the empty sink)."""
        self.baseline = self.audit()
        return None if self.baseline is None else self.baseline.records

    def keep(self, path: Path) -> Path | None:
        """A copy of everything the sink holds, as JSON lines at `path` (for inspection
        after a loss); None for the empty sink."""
        if self.sink == "file":
            if self.path.exists():
                shutil.copyfile(self.path, path)
            else:
                path.write_bytes(b"")
            return path
        if self.sink == "mongo":
            found = self._client[self.mongo_db][MONGO_COLLECTION].find({}, {"_id": 0})
            with path.open("w") as out:
                for doc in found:
                    out.write(json.dumps(doc, default=str, ensure_ascii=False) + "\n")
            return path
        return None

    def records(self, limit: int = 10) -> list[dict[str, Any]]:
        """The first records (for checks on their shape)."""
        if self.sink == "file":
            with self.path.open() as lines:
                return [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]
        if self.sink == "mongo":
            found = self._client[self.mongo_db][MONGO_COLLECTION].find({}, {"_id": 0})
            return list(found.sort("seq", 1).limit(limit))
        return []

    def describe(self) -> dict[str, Any]:
        """What stored the records: recorded in results (buildInfo for MongoDB)."""
        if self.sink == "file":
            return {"sink": "file", "path": str(self.path), "durable": self.durable}
        if self.sink == "mongo":
            info = self._client.admin.command("buildInfo")
            described: dict[str, Any] = {
                "sink": "mongo", "url": redact_url(self.mongo_url), "w": self.mongo_w,
                "database": self.mongo_db, "durable": self.durable,
                "batch_max_records": self.mongo_batch,
                "server": "FerretDB" if "ferretdbVersion" in info else "MongoDB",
                "version": info.get("ferretdbVersion") or info.get("version"),
                "mongodb_compatible_version": info.get("version"),
            }  # fmt: skip
            if self.database is not None:
                described["database"] = self.database.describe()
            if self.database is not None and self.mongo_w == 0:
                described["w0_warning"] = (
                    f"FerretDB {FERRETDB_VERSION} loses unacknowledged (w: 0) writes when the "
                    f"client disconnects; probe: {known_w0_probe()}"
                )
            return described
        return {"sink": "empty"}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._own_database is not None:
            self._own_database.stop()
        self._tempdir.cleanup()

    def __enter__(self) -> SinkStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

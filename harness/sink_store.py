"""The harness's side of a sink: what a server needs to write to it, and what it holds.

`SinkStore` gives a server its sink arguments (a fresh file, or a MongoDB URL — FerretDB
started here unless `--mongo-url` names a real MongoDB) and counts the records stored, so
verify can see a record arrive and the runner can reconcile: nothing lost.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from harness.services import FERRETDB_VERSION, FerretDB, known_w0_probe
from model.errors import UserError
from servers.core.sinks import MONGO_COLLECTION, MONGO_DATABASE


class SinkStore:
    """One sink's backing store for one server run; a context manager that cleans up."""

    def __init__(self, sink: str, *, mongo_url: str | None = None, mongo_w: int = 1,
                 mongo_db: str = MONGO_DATABASE, workdir: Path | None = None) -> None:  # fmt: skip
        self.sink = sink
        self.mongo_w = mongo_w
        self.mongo_db = mongo_db  # the run's own on a user's MongoDB (services.own_database)
        self._tempdir = tempfile.TemporaryDirectory(prefix=f"harness-{sink}-", dir=workdir)
        self.path = Path(self._tempdir.name) / "records.jsonl"
        self._ferretdb: FerretDB | None = None
        self._client: Any = None
        self.mongo_url = mongo_url
        if sink == "mongo":
            if mongo_url is None:
                self._ferretdb = FerretDB(Path(self._tempdir.name) / "ferretdb")
                self.mongo_url = self._ferretdb.url
            from pymongo import MongoClient

            self._client = MongoClient(self.mongo_url, serverSelectionTimeoutMS=5000)
            try:
                self._client[mongo_db][MONGO_COLLECTION].drop()
            except Exception as error:
                self.close()
                raise UserError(f"MongoDB at {self.mongo_url} is not reachable: {error}") from None

    def server_args(self) -> list[str]:
        if self.sink == "file":
            return ["--sink-path", str(self.path)]
        if self.sink == "mongo":
            return [
                *("--mongo-url", str(self.mongo_url), "--mongo-w", str(self.mongo_w)),
                *("--mongo-db", self.mongo_db),
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

    def records(self, limit: int = 10) -> list[dict[str, Any]]:
        """The first records (for checks on their shape)."""
        if self.sink == "file":
            import json

            with self.path.open() as lines:
                return [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]
        if self.sink == "mongo":
            found = self._client[self.mongo_db][MONGO_COLLECTION].find({}, {"_id": 0})
            return list(found.sort("seq", 1).limit(limit))
        return []

    def describe(self) -> dict[str, Any]:
        """What stored the records: recorded in results (buildInfo for MongoDB)."""
        if self.sink == "file":
            return {"sink": "file", "path": str(self.path)}
        if self.sink == "mongo":
            info = self._client.admin.command("buildInfo")
            described: dict[str, Any] = {
                "sink": "mongo", "url": self.mongo_url, "w": self.mongo_w,
                "database": self.mongo_db,
                "server": "FerretDB" if "ferretdbVersion" in info else "MongoDB",
                "version": info.get("ferretdbVersion") or info.get("version"),
                "mongodb_compatible_version": info.get("version"),
            }  # fmt: skip
            if self._ferretdb is not None and self.mongo_w == 0:
                described["w0_warning"] = (
                    f"FerretDB {FERRETDB_VERSION} loses unacknowledged (w: 0) writes when the "
                    f"client disconnects; probe: {known_w0_probe()}"
                )
            return described
        return {"sink": "empty"}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._ferretdb is not None:
            self._ferretdb.stop()
        self._tempdir.cleanup()

    def __enter__(self) -> SinkStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

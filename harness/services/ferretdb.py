"""FerretDB v1.24, the MongoDB-wire server the harness starts (on SQLite, or on the
run's PostgreSQL: harness.services.postgres), built from the Go module proxy into the
user's cache: a plain `go install ...@v1.24.2` binary panics at start because
build/version/version.txt is not in the module, so the module is copied, that file is
written, and cmd/ferretdb is built from the copy. Also: the w: 0 probe, and a database of a
run's own on a user's MongoDB (`--mongo-url`)."""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.services.base import Service
from model.errors import UserError
from model.files import cache_dir
from model.secrets import redact_url
from servers import scratch

FERRETDB_MODULE = "github.com/FerretDB/FerretDB"
FERRETDB_VERSION = "v1.24.2"


def ferretdb_binary() -> Path:
    return cache_dir() / f"ferretdb-{FERRETDB_VERSION}"


def build_ferretdb(log: Path | None = None) -> Path:
    """Build FerretDB from the Go module proxy (a few minutes the first time); its path."""
    binary = ferretdb_binary()
    if binary.is_file():
        return binary
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None
    )
    if go is None:
        raise UserError("go not found: install Go to build FerretDB, or pass --mongo-url")
    binary.parent.mkdir(parents=True, exist_ok=True)
    with scratch.temporary_directory("ferretdb-build") as work:
        download = subprocess.run(
            [go, "mod", "download", "-json", f"{FERRETDB_MODULE}@{FERRETDB_VERSION}"],
            capture_output=True,
            text=True,
            cwd=work,
            check=False,
        )
        if download.returncode != 0:
            raise UserError(f"go mod download {FERRETDB_MODULE} failed: {download.stderr[-300:]}")
        source = Path(work) / "src"
        shutil.copytree(json.loads(download.stdout)["Dir"], source)
        for path in source.rglob("*"):
            path.chmod(path.stat().st_mode | 0o200)
        (source / "build" / "version" / "version.txt").write_text(FERRETDB_VERSION + "\n")
        built = subprocess.run(
            [go, "build", "-trimpath", "-o", str(binary) + ".partial", "./cmd/ferretdb"],
            capture_output=True,
            text=True,
            cwd=source,
            check=False,
        )
        if log is not None:
            log.write_text(built.stdout + built.stderr)
        if built.returncode != 0:
            raise UserError(f"building FerretDB failed: {built.stderr.strip()[-300:]}")
    Path(str(binary) + ".partial").replace(binary)
    return binary


class FerretDB(Service):
    """FerretDB in its own state directory, telemetry off: on SQLite in `data_dir`, or on
    the PostgreSQL that `postgresql_url` names (harness.services.postgres).

    `port` 0 lets the OS choose; a given port restarts a database on the address its
    clients already know (the fault tests stop one mid-step and bring it back). `cpus`
    pins it with `taskset -c`.
    """

    name = "ferretdb"

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        *,
        postgresql_url: str | None = None,
        cpus: str | None = None,
    ) -> None:
        binary = ferretdb_binary()
        if not binary.is_file():
            raise UserError("FerretDB is not built: run `harness doctor --install`")
        data_dir.mkdir(parents=True, exist_ok=True)
        if postgresql_url is None:
            handler = ["--handler=sqlite", f"--sqlite-url=file:{data_dir}/"]
        else:
            handler = ["--handler=postgresql", f"--postgresql-url={postgresql_url}"]
        command = [
            str(binary),
            *handler,
            f"--state-dir={data_dir}",
            f"--listen-addr=127.0.0.1:{port}",
            "--debug-addr=-",
            "--telemetry=disable",
            "--log-level=WARN",
        ]
        super().__init__(["taskset", "-c", cpus, *command] if cpus else command, data_dir)

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"


W0_PROBE_RECORDS = 1000


def probe_unacknowledged_writes(records: int = W0_PROBE_RECORDS) -> dict[str, int | str]:
    """Insert `records` documents with w: 0, disconnect, count what FerretDB kept.

    FerretDB v1.24 answers unacknowledged OP_MSG writes and drops what is still queued when
    the client goes away; the figure is written beside the binary and reported by doctor
    and in every result that uses `--mongo-w 0` with it.
    """
    from pymongo import MongoClient
    from pymongo.write_concern import WriteConcern

    with scratch.temporary_directory("ferretdb-w0") as data, FerretDB(Path(data)) as db:
        client = MongoClient(db.url, serverSelectionTimeoutMS=5000)
        collection = client.harness.get_collection("w0probe", write_concern=WriteConcern(w=0))
        for seq in range(records):
            collection.insert_one({"seq": seq})
        client.close()
        time.sleep(1.0)
        checker = MongoClient(db.url, serverSelectionTimeoutMS=5000)
        kept = checker.harness.w0probe.count_documents({})
        checker.close()
    result: dict[str, int | str] = {
        "sent": records,
        "stored": kept,
        "lost": records - kept,
        "server": f"FerretDB {FERRETDB_VERSION}",
    }
    w0_probe_path().write_text(json.dumps(result))
    return result


def w0_probe_path() -> Path:
    return cache_dir() / f"ferretdb-{FERRETDB_VERSION}-w0.json"


def known_w0_probe() -> dict[str, int | str] | None:
    try:
        return json.loads(w0_probe_path().read_text())
    except (OSError, ValueError):
        return None


def new_database_name() -> str:
    """A MongoDB database of one run's own (`--mongo-db`): harness_<UTC time>_<random>."""
    return f"harness_{time.strftime('%Y%m%d_%H%M%S', time.gmtime())}_{secrets.token_hex(4)}"


@contextlib.contextmanager
def own_database(mongo_url: str, name: str) -> Iterator[None]:
    """Claim database `name` on a user's MongoDB for a run, and drop it afterwards.

    The harness writes its records and GridFS bucket only there and drops only what it
    created: a database of that name that exists already is refused, never reused.
    """
    from pymongo import MongoClient

    client: Any = MongoClient(mongo_url, serverSelectionTimeoutMS=5000)
    try:
        try:
            existing = client.list_database_names()
        except Exception as error:
            raise UserError(
                f"MongoDB at {redact_url(mongo_url)} is not reachable: {error}"
            ) from None
        if name in existing:
            raise UserError(
                f"MongoDB at {redact_url(mongo_url)} has a database {name} already: not ours"
            )
        try:
            yield
        finally:  # interrupted or failed too: it is ours
            with contextlib.suppress(Exception):
                client.drop_database(name)
    finally:
        client.close()

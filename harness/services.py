"""Services the servers talk to, started and stopped by the harness itself.

- FerretDB v1.24 (a MongoDB-wire server on SQLite) built from the Go module proxy into the
  user's cache: a plain `go install ...@v1.24.2` binary panics at start because
  build/version/version.txt is not in the module, so the module is copied, that file is
  written, and cmd/ferretdb is built from the copy.
- memcached from Debian, on its own loopback port, never as root (`-u nobody`).
Each runs in its own process group and is always reaped. Each binds a port the OS chooses
(port 0; memcached's `-p -1`) and the harness reads it back from the process's own
listening socket (servers.listeners): never a port picked free and reused, never "a
connect succeeded", which another process's listener would pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from drivers.processes import spawn
from harness.tools import tool_path
from model.errors import UserError
from model.files import cache_dir
from model.secrets import redact_url
from servers import listeners, scratch

FERRETDB_MODULE = "github.com/FerretDB/FerretDB"
FERRETDB_VERSION = "v1.24.2"
READY_TIMEOUT_S = 20.0


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


def wait_listening(process: subprocess.Popen, name: str, host: str = "127.0.0.1") -> int:
    """The port `process` (or a child) listens on at `host`, once it does; UserError if it
    exits first, never listens, or shares the port with another process."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise UserError(f"{name} exited with status {process.returncode} before listening")
        pids = listeners.tree_pids(process.pid)
        ports = listeners.listening_ports(pids, host)
        if len(ports) > 1:
            raise UserError(f"{name} listens on several ports ({sorted(ports)}), not one")
        if ports:
            others = listeners.other_listeners(ports, pids)
            if others:
                raise UserError(f"{name}: another process listens on its port too: {others}")
            return ports.pop()
        time.sleep(0.05)
    raise UserError(f"{name} did not listen within {READY_TIMEOUT_S:.0f} s")


class Service:
    """A helper process in its own group; `stop()` ends the whole group."""

    name = "service"

    def __init__(self, command: list[str], workdir: Path | None = None) -> None:
        self.port = 0
        self.workdir = workdir
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives with the process)
        self.process = spawn(command, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            self.port = wait_listening(self.process, self.name)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def output_tail(self, limit_chars: int = 500) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit_chars:]

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class FerretDB(Service):
    """FerretDB in its own state directory, telemetry off: on SQLite in `data_dir`, or on
    the PostgreSQL that `postgresql_url` names (harness.postgres).

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


MEMCACHED_USER = "nobody"  # what memcached runs as when the harness is root


def memcached_user_args() -> list[str]:
    """`-u nobody` when the harness runs as root (memcached refuses root without -u, and a
    cache the servers write to has no business holding root's rights); nothing otherwise
    (memcached changes user only when started as root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(MEMCACHED_USER)
    except KeyError:
        raise UserError(
            f"memcached would run as root: this machine has no {MEMCACHED_USER} user"
        ) from None
    return ["-u", MEMCACHED_USER]


class Memcached(Service):
    """memcached on loopback with enough connections for a pool of 50 per server worker."""

    name = "memcached"

    def __init__(self, memory_mb: int = 64) -> None:
        path = tool_path("memcached")
        if path is None:
            raise UserError("memcached not found: run `harness doctor --install`")
        # its working directory, though it writes nothing: what `harness clean` finds it
        # by when a killed run left it running (harness.leftovers)
        self._scratch = scratch.temporary_directory("memcached")
        try:
            self._start(path, memory_mb)
        except BaseException:
            self._scratch.cleanup()
            raise

    def _start(self, path: str, memory_mb: int) -> None:
        super().__init__(
            [
                path,
                "-l",
                "127.0.0.1",
                "-p",
                "-1",  # an ephemeral port (what memcached's own tests use); 0 turns TCP off
                "-U",
                "0",
                "-m",
                str(memory_mb),
                "-c",
                "4096",
                *memcached_user_args(),
            ],
            Path(self._scratch.name),
        )

    def stop(self) -> None:
        super().stop()
        self._scratch.cleanup()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, key: str, value: bytes) -> None:
        """Store one value with the text protocol (the memcached-proxy study's 100 bytes)."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as sock:
            sock.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), len(value), value))
            reply = sock.recv(64)
        if reply != b"STORED\r\n":
            raise UserError(f"memcached refused set {key}: {reply!r}")


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

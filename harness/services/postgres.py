"""A throwaway PostgreSQL cluster for FerretDB's `postgresql` handler, run by the harness.

PostgreSQL comes from Debian (`postgresql`, installed by `harness doctor --install` with
its system cluster neither started nor enabled); the binaries live in
/usr/lib/postgresql/<major>/bin, outside PATH. Each cluster is made for one run in a
private temporary directory: `initdb` there, the server listening only on a unix socket in
that same directory (`listen_addresses = ''`: no TCP port to pick or to race for, and no
other user can reach it), as the `postgres` user when the harness is root (PostgreSQL
refuses to run as root). `stop()` ends it with an immediate shutdown (the cluster is
thrown away: no shutdown checkpoint worth waiting for) and removes the directory.

Settings, and why (recorded in results by `describe`):
- `synchronous_commit = off` unless the run is durable: a commit returns before its WAL
  is flushed, as MongoDB's default w: 1 without journal acknowledges before the journal
  (the WAL still reaches disk within `wal_writer_delay`; fsync stays on).
- `plan_cache_mode = force_custom_plan`: FerretDB v1.24 sends an equality filter as
  `_jsonb->$1 @> $2` through cached prepared statements; a generic plan cannot see that
  `$1` is '_id', so it never uses a GIN index on `(_jsonb->'_id')`; a custom plan does.
- `default_toast_compression = lz4`: GridFS chunks (the file set's bytes, base64 in
  FerretDB's JSON) do not compress, and lz4 gives up on them sooner than the default pglz:
  loading 10,000 files took 22 s instead of 35–44 s here, for the same 234 MB.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from drivers.processes import kill_group, spawn
from harness.tools import postgres_bin_dir
from model.errors import UserError
from servers import scratch

SUPERUSER = "postgres"  # the cluster's superuser (initdb -U), whoever runs it
DATABASE = "postgres"  # FerretDB keeps each MongoDB database as a schema in this one
PORT = 5432  # names the socket file (.s.PGSQL.5432) in the private directory; no TCP
INITDB_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
SQL_TIMEOUT_S = 600.0  # a GIN index over 10,000 GridFS chunks detoasts every one
SOCKET_PATH_MAX = 107  # sun_path of a unix socket, less its final NUL


def bin_dir() -> Path | None:
    """The directory holding initdb, postgres and psql (harness.tools.postgres_bin_dir)."""
    return postgres_bin_dir()


def server_version() -> str | None:
    """`15.18` for the PostgreSQL `bin_dir` holds; None when it is not installed."""
    directory = bin_dir()
    if directory is None:
        return None
    try:
        result = subprocess.run(
            [str(directory / "postgres"), "--version"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"\d+(?:\.\d+)+", result.stdout)
    return match.group(0) if match else None


def server_account() -> pwd.struct_passwd | None:
    """Who runs the server: the `postgres` user when the harness is root, else None (the
    harness's own user). UserError when root has no `postgres` user to run it as."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise UserError(
            "PostgreSQL refuses to run as root and there is no `postgres` user: "
            "run `harness doctor --install`, or use --mongo-backend sqlite"
        ) from None


def unreachable_ancestor(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first directory above `path` that `account` may not enter (no search
    permission for it), or None when it can reach `path`."""
    for directory in reversed(path.parents):
        mode = directory.stat()
        if mode.st_uid == account.pw_uid:
            allowed = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid == account.pw_gid:
            allowed = mode.st_mode & stat.S_IXGRP
        else:
            allowed = mode.st_mode & stat.S_IXOTH
        if not allowed:
            return directory
    return None


def settings(durable: bool) -> dict[str, str]:
    """The server settings the harness sets (the module docstring says why)."""
    return {
        "listen_addresses": "",
        "port": str(PORT),
        "synchronous_commit": "on" if durable else "off",
        "plan_cache_mode": "force_custom_plan",
        "default_toast_compression": "lz4",
    }


class PostgreSQL:
    """A cluster of its own in a fresh temporary directory, started at once; `stop()` ends
    it and removes the directory (also when starting fails or is interrupted).

    `cpus` pins the server (and every process it forks) with `taskset -c`.
    """

    name = "postgresql"

    def __init__(
        self, *, durable: bool = False, cpus: str | None = None, workdir: Path | None = None
    ) -> None:
        directory = bin_dir()
        if directory is None:
            raise UserError(
                "PostgreSQL not found: run `harness doctor --install` "
                "(or use --mongo-backend sqlite)"
            )
        self.bin_dir = directory
        self.settings = settings(durable)
        self.cpus = cpus
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (lives with the process)
        self.directory = scratch.mkdtemp("pg", workdir)
        try:
            self._account = server_account()
            self._start()
        except BaseException:  # Ctrl-C too: no server and no directory left behind
            self.stop()
            raise

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory

    @property
    def url(self) -> str:
        """A libpq URL for FerretDB's --postgresql-url: the unix socket, as the superuser."""
        return f"postgres://{SUPERUSER}@/{DATABASE}?host={self.socket_dir}"

    def _start(self) -> None:
        socket_path = self.socket_dir / f".s.PGSQL.{PORT}"
        if len(str(socket_path)) > SOCKET_PATH_MAX:
            raise UserError(
                f"the PostgreSQL socket path {socket_path} is longer than a unix socket allows "
                f"({SOCKET_PATH_MAX} bytes): set TMPDIR to a shorter directory"
            )
        run_as = None
        if self._account is not None:
            blocked = unreachable_ancestor(self.directory, self._account)
            if blocked is not None:
                raise UserError(
                    f"PostgreSQL runs as the postgres user, who cannot enter {blocked}: "
                    "set TMPDIR to a directory it can reach (/tmp), or use --mongo-backend sqlite"
                )
            os.chown(self.directory, self._account.pw_uid, self._account.pw_gid)
            run_as = (self._account.pw_uid, self._account.pw_gid)
        # its own session, like every child: on an interrupt the whole group goes, the
        # bootstrap server initdb forks included
        initdb = spawn(
            [
                str(self.bin_dir / "initdb"),
                *("-D", str(self.data_dir), "-U", SUPERUSER),
                *("--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync"),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            run_as=run_as,
        )
        try:
            initdb.wait(INITDB_TIMEOUT_S)
        except BaseException as error:  # timed out, or interrupted (Ctrl-C, SIGTERM)
            kill_group(initdb)
            initdb.wait()
            if isinstance(error, subprocess.TimeoutExpired):
                raise UserError(f"initdb took over {INITDB_TIMEOUT_S:.0f} s") from None
            raise
        if initdb.returncode != 0:
            raise UserError(f"initdb failed: {self.output_tail()}")
        command = [
            str(self.bin_dir / "postgres"),
            *("-D", str(self.data_dir), "-k", str(self.socket_dir)),
            *(arg for key, value in self.settings.items() for arg in ("-c", f"{key}={value}")),
        ]
        if self.cpus is not None:
            command = ["taskset", "-c", self.cpus, *command]
        # SIGQUIT if the harness dies: an immediate shutdown, which still removes the
        # server's shared memory (SIGKILL would leave it behind)
        self.process = spawn(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            death_signal=signal.SIGQUIT,
            run_as=run_as,
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Until postmaster.pid says `ready` (what `pg_ctl start -w` waits for)."""
        assert self.process is not None
        pid_file = self.data_dir / "postmaster.pid"
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UserError(
                    f"PostgreSQL exited with status {self.process.returncode} before it was "
                    f"ready: {self.output_tail()}"
                )
            with contextlib.suppress(OSError):
                lines = pid_file.read_text().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready":
                    return
            time.sleep(0.05)
        raise UserError(f"PostgreSQL was not ready within {READY_TIMEOUT_S:.0f} s")

    def sql(self, statement: str) -> str:
        """Run `statement` with psql over the socket; its rows, `|`-separated, one a line."""
        result = subprocess.run(
            [
                str(self.bin_dir / "psql"),
                *("-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"),
                *("-h", str(self.socket_dir), "-p", str(PORT), "-U", SUPERUSER, "-d", DATABASE),
                *("-c", statement),
            ],
            cwd=self.directory,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=SQL_TIMEOUT_S,
        )
        if result.returncode != 0:
            error = result.stderr.strip()[-300:]
            raise UserError(f"PostgreSQL refused {statement[:80]!r}: {error}")
        return result.stdout.strip()

    def pids(self) -> list[int]:
        """The postmaster's pid (its backends are its children), or none once stopped."""
        if self.process is None or self.process.poll() is not None:
            return []
        return [self.process.pid]

    def output_tail(self, limit_chars: int = 500) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-limit_chars:]

    def stop(self) -> None:
        """Immediate shutdown, then the whole process group killed, then the directory gone."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGQUIT)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process is not None:  # a backend that outlived its postmaster (SIGKILL'd)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(self.directory, ignore_errors=True)
        self._log.close()

    def __enter__(self) -> PostgreSQL:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

"""Secrets, end to end: a `--mongo-url` password never appears on a
process's command line (`ps`), in run.json, in any file of the run or in what the harness
prints; nor does a `--server` command's `{secret:NAME}` value, outside that command's own
command line.

The MongoDB is a FerretDB started here, which accepts any user and password over the
PLAIN mechanism (`?authMechanism=PLAIN`): the password only has to travel.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.server_process import start_server
from harness.services.ferretdb import FerretDB, new_database_name
from harness.services.sink_store import SinkStore
from servers import FRAMEWORKS, contract, listeners
from servers.plugins import load_plugins
from tests.helpers import ONE_STEP_SMOKE, require_ferretdb, require_framework, require_tools

# a run's secrets: distinctive, so a hit is ours and not another process's
PASSWORD = f"secret-{secrets.token_hex(6)}"
TOKEN = f"token-{secrets.token_hex(6)}"
# one server per runtime that reads the URL: Python's, Node's, a contender's (a command)
RUNTIMES = ["aiohttp", "node-http", "uvicorn-starlette"]


@pytest.fixture
def user_url(tmp_path: Path) -> Iterator[str]:
    """A MongoDB URL with a user and PASSWORD, to a FerretDB of this test's own."""
    require_ferretdb()
    with FerretDB(tmp_path / "user-db") as db:
        yield f"mongodb://user:{PASSWORD}@127.0.0.1:{db.port}/?authMechanism=PLAIN"


def command_lines(pid: int) -> list[str]:
    """The command line of `pid` and of each of its descendants."""
    lines = []
    for each in listeners.tree_pids(pid):
        try:
            lines.append(Path(f"/proc/{each}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:  # gone meanwhile
            continue
    return lines


@pytest.mark.parametrize("framework", RUNTIMES)
def test_a_server_gets_the_url_in_its_environment_not_on_its_command_line(
    framework: str, user_url: str
) -> None:
    """Found: SinkStore.server_args put `--mongo-url URL` on every server's command line,
    and the contenders' `env SERVERBENCH_MONGO_URL={mongo_url}` on theirs."""
    load_plugins()  # the contenders are a plugin's entries
    if framework not in FRAMEWORKS:
        pytest.skip(f"{framework} is not registered (pip install -e '.[contenders]')")
    require_framework(framework)
    with (
        SinkStore("mongo", mongo_url=user_url, mongo_db=new_database_name()) as store,
        start_server(framework, sink="mongo", extra_args=store.server_args()) as server,
    ):
        lines = command_lines(server.pid)
        assert lines and not [line for line in lines if PASSWORD in line]
        reply = httpx.post(server.url + contract.ROUTE_LOG, content=b"x", timeout=10)
        assert reply.is_success, reply.text
        assert store.count() == 1  # the URL reached it: the default one has no MongoDB
        assert PASSWORD not in str(store.describe())
        assert "user:***@127.0.0.1" in store.describe()["url"]


def test_a_run_with_a_password_leaves_it_nowhere(user_url: str, tmp_path: Path) -> None:
    """A compare with `--mongo-url mongodb://user:PASSWORD@…` and a `--server` command
    given `{secret:LEAK_TOKEN}` that prints it and dies: no PASSWORD on any command line
    while it runs, no PASSWORD nor TOKEN in run.json, in any file of the run, or in what
    the harness printed."""
    require_tools("wrk")
    require_framework("aiohttp")
    executable = shutil.which("harness")
    assert executable, "the harness console script is not installed"
    leaky = (
        'leaky={python} -c \'import sys; print("the token is", sys.argv[-1], flush=True); '
        "sys.exit(3)' {sink} {mongo_db} {secret:LEAK_TOKEN}"
    )
    out = tmp_path / "out"
    command = [
        executable, "compare", "--frameworks", "aiohttp,leaky", "--server", leaky,
        "--profile", "smoke", *ONE_STEP_SMOKE, "--scenario", "log", "--sink", "mongo",
        "--mongo-url", user_url, "--out", str(out),
    ]  # fmt: skip
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with stdout.open("wb") as out_file, stderr.open("wb") as err_file:
        # the harness's own command line has the URL: the user typed it (an environment
        # variable or a profile would keep it off: docs); everything it starts must not
        harness = subprocess.Popen(
            command,
            stdout=out_file,
            stderr=err_file,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "LEAK_TOKEN": TOKEN},
        )
        servers_seen = 0
        try:
            while harness.poll() is None:
                table = subprocess.run(
                    ["ps", "-eo", "pid=,args="], capture_output=True, text=True, check=True
                ).stdout
                rows = [row.strip().split(None, 1) for row in table.splitlines() if row.strip()]
                started = [args for pid, args in rows if int(pid) != harness.pid]
                assert not [args for args in started if PASSWORD in args]
                servers_seen += any("-m servers aiohttp" in args for args in started)
            harness.wait(timeout=600)
        finally:
            if harness.poll() is None:
                harness.kill()
                harness.wait()
    assert servers_seen > 0, "no ps snapshot caught the server running"
    printed = stdout.read_text() + stderr.read_text()
    [run_dir] = list(out.iterdir())
    run_json = (run_dir / "run.json").read_text()
    assert '"status": "complete"' in run_json, printed
    assert "user:***@127.0.0.1" in run_json  # the sink's URL, its password hidden
    for secret in (PASSWORD, TOKEN):
        assert secret not in printed
        for path in [p for p in run_dir.rglob("*") if p.is_file()]:
            assert secret.encode() not in path.read_bytes(), path
    assert "the token is ***" in run_json, "the leaky server's failure is not recorded"
    assert FRAMEWORKS.get("leaky") is None  # registered in the harness process only

"""What a kill leaves, and what cannot block the harness.

Real processes only: memcached as the harness starts it, a `--server` command that
daemonizes itself out of the harness's process group, the temporary directories and
services of a run killed with SIGKILL (`harness doctor` lists them, `harness clean`
removes them), and plugins that raise, exit or hang on import.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.services.memcached import Memcached
from model.results import read_run
from servers import scratch
from tests.helpers import ONE_STEP_SMOKE, harness, require_tool, require_tools, write_plugin

pytestmark = pytest.mark.serial  # kills runs; cleans every dead owner's directories here


def test_memcached_never_runs_as_root() -> None:
    require_tool("memcached")
    with Memcached() as memcached:
        process = psutil.Process(memcached.process.pid)
        assert process.uids().effective != 0, process.cmdline()
        assert process.uids().real != 0, process.cmdline()


# -- plugins cannot block the harness ----------------------------------------------------
BROKEN_PLUGINS = {  # module: (what its import does, what the harness says of it)
    "e2e_raising_plugin": ("raise ImportError('needs libfoo')\n", "ImportError: needs libfoo"),
    "e2e_exiting_plugin": ("import sys\nsys.exit('bye')\n", "SystemExit: bye"),
    "e2e_hanging_plugin": ("while True:\n    pass\n", "hung on import: no answer within 2 s"),
}


def test_a_plugin_that_raises_exits_or_hangs_on_import_never_stops_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    for module, (source, _) in BROKEN_PLUGINS.items():
        write_plugin(site, module, source + "def frameworks():\n    return []\n")
    write_plugin(
        site,
        "e2e_fine_plugin",
        "from servers import Framework\n\n\n"
        "def frameworks():\n"
        "    return [Framework('fine-plugin', '', (), ('own',), kind='command',\n"
        "                      command='true {host} {port}')]\n",
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("SERVERBENCH_PLUGIN_TIMEOUT_S", "2")

    listed = harness("list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["framework"]: row for row in json.loads(listed.stdout)}
    assert rows["fine-plugin"]["origin"] == "plugin e2e-fine-plugin 1.0"
    assert "aiohttp" in rows and "nginx" in rows  # the other servers are all there
    for module, (_, problem) in BROKEN_PLUGINS.items():
        said = f"broken plugin, not loaded: {module} (plugin {module.replace('_', '-')} 1.0)"
        assert f"{said}: {problem}" in listed.stderr, listed.stderr
    table = harness("list")
    assert table.returncode == 0, table.stderr
    assert "e2e_hanging_plugin" in table.stdout and "hung on import" in table.stdout

    doctor = harness("doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    broken = json.loads(doctor.stdout)["broken_plugins"]
    assert len(broken) == len(BROKEN_PLUGINS) and any("SystemExit: bye" in p for p in broken)
    # every command loads the plugins first, `fleet down` too (its help only, here: the
    # command itself would remove this machine's fleet)
    down = harness("fleet", "down", "--help")
    assert down.returncode == 0 and "Usage" in down.stdout, down.stderr


# -- a --server command that daemonizes --------------------------------------------------
DAEMON_APP = '''\
"""An HTTP server that daemonizes itself (double fork and setsid), as `--daemon` does."""
import http.server
import os
import sys

host, port = sys.argv[1], int(sys.argv[2])
detached, told = os.pipe()
if os.fork():
    # the harness's process: gone before anything listens, but only once the daemon is out
    # of the group (on a loaded machine the group's kill could otherwise catch it first)
    os.close(told)
    os.read(detached, 1)
    os._exit(0)
os.setsid()  # out of the harness's process group
if os.fork():
    os._exit(0)
os.write(told, b"x")


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")


http.server.HTTPServer((host, port), Hello).serve_forever()
'''


def daemon_processes(script: Path) -> list[psutil.Process]:
    """The processes running `script` (what a daemonized command left)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        alive = process.info["status"] != psutil.STATUS_ZOMBIE
        if alive and str(script) in (process.info["cmdline"] or []):
            found.append(process)
    return found


def test_a_server_command_that_daemonizes_is_named_and_stopped(tmp_path: Path) -> None:
    require_tools("wrk")
    script = tmp_path / "daemon_app.py"
    script.write_text(DAEMON_APP)
    server = f"daemonapp={sys.executable} {script} {{host}} {{port}}"
    results = tmp_path / "results"
    ran = harness(
        "run", "--framework", "daemonapp", "--profile", "smoke", *ONE_STEP_SMOKE,
        "--server", server, "--out", str(results), timeout_s=180,
    )  # fmt: skip
    [run_dir] = list(results.iterdir())
    [case] = read_run(run_dir).cases
    assert case.status == "failed", case
    assert case.error is not None and "daemonized out of the harness's process group" in (
        case.error
    ), case.error
    assert str(script) in case.error  # named: pid and command line
    assert "daemonized" in ran.stderr, ran.stderr  # the warning, as it happened
    port = int(re.search(r"before listening on (\d+)", case.error).group(1))  # type: ignore[union-attr]
    assert not daemon_processes(script)
    assert not [
        c for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    ]  # fmt: skip


# -- what a killed run leaves: harness doctor lists it, harness clean removes it ---------
OWNER = """\
import subprocess, sys, time
from harness.services.postgres import PostgreSQL, bin_dir
from servers import scratch

directories = []
if bin_dir() is not None:
    directories.append(PostgreSQL().directory)  # a cluster of its own, as a run makes
sink = scratch.mkdtemp("sink-file")
(sink / "records.jsonl").write_bytes(b"x" * 100_000)
work = scratch.mkdtemp("memcached")
memcached = subprocess.Popen(  # no parent-death signal: it outlives a SIGKILL'd owner
    [sys.argv[1], "-l", "127.0.0.1", "-p", "-1", "-U", "0", "-u", "nobody"],
    cwd=work, start_new_session=True,
)
print(memcached.pid, sink, work, *directories, flush=True)
time.sleep(3600)
"""


@pytest.fixture
def short_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A TMPDIR of this test's own, short enough for PostgreSQL's socket path and open to
    the postgres user."""
    root = Path(tempfile.mkdtemp(prefix="lo-", dir="/tmp"))
    root.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_killed_runs_directories_and_services_are_listed_then_removed(
    short_tmpdir: Path,
) -> None:
    require_tool("memcached")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, shutil.which("memcached") or "memcached"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    memcached_pid, *paths = owner.stdout.readline().split()
    owner.kill()  # SIGKILL: no cleanup of its own runs
    owner.wait()
    owner.stdout.close()
    memcached = psutil.Process(int(memcached_pid))
    ours = scratch.mkdtemp("tls")  # a live owner's (this test's): never touched

    doctor = harness("doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    listed = {record["path"]: record for record in json.loads(doctor.stdout)["leftovers"]}
    assert set(paths) <= set(listed) and str(ours) not in listed, listed
    kinds = {listed[path]["kind"] for path in paths}
    assert {"sink-file", "memcached"} <= kinds and kinds <= {"sink-file", "memcached", "pg"}
    assert all(listed[path]["owner_pid"] == owner.pid for path in paths)
    assert listed[paths[0]]["size_bytes"] == 100_000
    [running] = listed[paths[1]]["processes"]
    assert running["pid"] == memcached.pid and "memcached" in running["command"]
    table = harness("doctor")
    assert "harness clean" in table.stdout and "sink-file" in table.stdout, table.stdout

    dry = harness("clean", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert {record["path"] for record in json.loads(dry.stdout)["leftovers"]} >= set(paths)
    assert all(Path(path).is_dir() for path in paths) and memcached.is_running()

    cleaned = harness("clean")
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert "removed" in cleaned.stdout
    assert not any(Path(path).exists() for path in paths)
    assert not memcached.is_running() or memcached.status() == psutil.STATUS_ZOMBIE
    assert ours.is_dir()  # its owner runs
    again = harness("clean", "--json")
    assert json.loads(again.stdout)["leftovers"] == []
    shutil.rmtree(ours)


FILESET_OWNER = """\
import sys, time
from harness.services.fileset import ensure_fileset


def progress(done, total):
    print(done, flush=True)
    time.sleep(3600)  # killed half-way through


ensure_fileset(300, 4, progress=progress)
"""


def test_a_file_set_killed_half_way_is_listed_then_removed(
    short_tmpdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(short_tmpdir / "cache"))
    owner = subprocess.Popen([sys.executable, "-c", FILESET_OWNER], stdout=subprocess.PIPE)
    assert owner.stdout is not None and owner.stdout.readline().strip() == b"100"
    owner.kill()
    owner.wait()
    owner.stdout.close()
    cache = short_tmpdir / "cache" / "serverbench-harness"
    [partial] = list(cache.iterdir())

    doctor = harness("doctor", "--json")
    [record] = [r for r in json.loads(doctor.stdout)["leftovers"] if r["path"] == str(partial)]
    assert record["kind"] == "files" and record["owner_pid"] == owner.pid
    assert record["size_bytes"] > 100 * 1024  # a hundred files of at least 1 KiB
    cleaned = harness("clean")
    assert cleaned.returncode == 0, cleaned.stderr
    assert list(cache.iterdir()) == []


def test_a_killed_runs_cgroups_are_removed_by_clean_and_a_live_ones_kept() -> None:
    """A harness killed outright cannot remove its server's cgroup: `harness clean` does
    (every hierarchy), `--dry-run` only names it, and a live harness's group is kept."""
    from harness.cgroups.groups import GROUP_PREFIX, detect_support

    support = detect_support()
    if not support.usable:
        pytest.skip(f"no cgroups here: {support.reason}")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)  # a pid no process has now: a killed harness's
    parents = list(dict.fromkeys(support.parents.values()))
    dead = [parent / f"{GROUP_PREFIX}{gone.pid}-1-server" for parent in parents]
    live = [parent / f"{GROUP_PREFIX}{os.getpid()}-99-server" for parent in parents]
    for directory in (*dead, *live):
        directory.mkdir()
    try:
        dry = harness("clean", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert {str(d) for d in dead} <= set(json.loads(dry.stdout)["cgroups"])
        assert all(d.is_dir() for d in dead)
        cleaned = harness("clean")
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert "cgroup directories of killed runs" in cleaned.stdout
        assert not any(d.exists() for d in dead) and all(d.is_dir() for d in live)
    finally:
        for directory in (*dead, *live):
            with contextlib.suppress(OSError):
                directory.rmdir()

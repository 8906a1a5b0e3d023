"""What a kill leaves, and what cannot block the harness (issue 22, items 7 and 8).

Real processes only: memcached as the harness starts it, a `--server` command that
daemonizes itself out of the harness's process group, the temporary directories and
services of a run killed with SIGKILL (`harness doctor` lists them, `harness clean`
removes them), and plugins that raise, exit or hang on import.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import psutil
import pytest

from harness.services import Memcached
from model.results import read_run
from tests.helpers import harness, require_tool, require_tools, write_plugin


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
if os.fork():
    os._exit(0)  # the harness's process: gone before anything listens
os.setsid()  # out of the harness's process group
if os.fork():
    os._exit(0)


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
        "run", "--framework", "daemonapp", "--profile", "smoke", "--server", server,
        "--out", str(results), timeout_s=180,
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

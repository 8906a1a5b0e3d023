"""Bring your own server, end to end: a one-file app on stock uvicorn given with
`--server`, a plugin package, and the shipped contenders — each verified on the routes it
serves (the rest `not supported`) and measured by the smoke profile.

Every server here is a real process on a loopback port; every load is the smoke
profile's first wrk step, shortened to a second (a measured step is what they check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from model.results import read_run
from tests.helpers import (
    ONE_STEP_SMOKE,
    contenders_path,
    harness,
    require_ferretdb,
    require_tools,
    write_plugin,
)

# A one-file ASGI app, as a user would write it: the contract's `/` and nothing else
# (other paths 404, other methods 405, oversized headers 431: httptools takes them).
ONE_FILE_APP = """
BODY = b"I am a stupid HTTP server!"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":  # no WebSocket here: uvicorn refuses the handshake
        return
    status, body, extra = 200, BODY, []
    if sum(len(k) + len(v) for k, v in scope["headers"]) > 65536:
        status, body, extra = 431, b"", [(b"connection", b"close")]
    elif scope["path"] != "/":
        status, body = 404, b"not found"
    elif scope["method"] not in ("GET", "HEAD"):
        status, body, extra = 405, b"", [(b"allow", b"GET, HEAD")]
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra})
    await send({"type": "http.response.body", "body": body})
"""
CONTENDERS = ("uvicorn-starlette", "granian", "gunicorn-gevent", "hypercorn")
# several servers started, verified and measured one after the other: minutes on a busy
# 2-core machine (the harness's own timeouts below bound each command)
LONG_TEST_S = 600
UNSERVED_BY_ONE_FILE_APP = ("counter", "log", "wrong-method", "ws-handshake", "ws-raw-frames")


def require_uvicorn() -> None:
    pytest.importorskip("uvicorn", reason="pip install serverbench-harness[contenders]")


def one_file_app(directory: Path) -> str:
    """The app written into `directory`; the `--server` command serving it on uvicorn."""
    (directory / "app.py").write_text(ONE_FILE_APP)
    return (
        f"{sys.executable} -m uvicorn app:app --app-dir {directory} "
        "--host {host} --port {port} --no-access-log"
    )


def only_run(results: Path):
    [run_dir] = list(results.iterdir())
    return read_run(run_dir), run_dir


@pytest.mark.timeout(LONG_TEST_S)
def test_a_command_given_with_server_is_verified_and_measured(tmp_path: Path) -> None:
    require_uvicorn()
    require_tools("wrk")
    server = "oneapp=" + one_file_app(tmp_path)
    verified = harness(
        "verify", "--frameworks", "oneapp", "--no-backends", "--json", "--server", server
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    [result] = json.loads(verified.stdout)
    checks = {check["name"]: check for check in result["checks"]}
    for name in ("text", "not-found", "malformed", "sequential-latency", "sigterm"):
        assert checks[name]["ok"] and checks[name]["supported"], checks[name]
    for name in UNSERVED_BY_ONE_FILE_APP:
        assert not checks[name]["supported"], checks[name]
        assert checks[name]["detail"].startswith("not supported"), checks[name]
    assert "/counter: 404" in checks["counter"]["detail"]
    assert "handshake refused" in checks["ws-handshake"]["detail"]
    assert not checks["telemetry"]["supported"]

    results = tmp_path / "results"
    compared = harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--frameworks", "oneapp",
        "--server", server, "--out", str(results), timeout_s=240,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "no telemetry line" in compared.stdout
    run, _ = only_run(results)
    [case] = run.cases
    assert case.status == "ok", case.error
    assert case.verify["text"]["ok"] and case.verify["counter"]["detail"].startswith(
        "not supported"
    )
    assert case.summary.peak and case.summary.peak > 100
    assert "no telemetry line" in (case.summary.limit_note or "")
    for step in case.steps:
        assert step.errors["total"] == 0 and step.achieved > 100
        assert step.server_cpu_pct and step.server_cpu_pct > 0  # its process tree, by psutil
        assert step.rss_max_bytes and step.rss_max_bytes > 1_000_000
        assert step.tick_ms == {"avg": None, "max": None}  # no telemetry: no tick lag
    assert run.config["servers"]["oneapp"]["origin"] == "--server"
    assert "uvicorn app:app" in run.config["servers"]["oneapp"]["command"]

    skipped_results = tmp_path / "skipped"
    skipped = harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--frameworks", "oneapp",
        "--server", server, "--scenario", "log", "--out", str(skipped_results), timeout_s=120,
    )  # fmt: skip
    run, _ = only_run(skipped_results)
    [case] = run.cases
    assert case.status == "skipped", (case.status, case.error, skipped.stderr)
    assert case.error == "not supported: oneapp answers 404 on /log"


@pytest.mark.timeout(LONG_TEST_S)
def test_a_plugin_package_is_listed_with_its_origin_and_runs_in_a_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_uvicorn()
    require_tools("wrk")
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    command = one_file_app(app_dir).replace(sys.executable, "{python}")
    site = tmp_path / "site-packages"
    site.mkdir()
    write_plugin(
        site,
        "byo_e2e_plugin",
        "from servers import Framework, contract\n\n\n"
        "def frameworks():\n"
        "    return [\n"
        "        Framework(\n"
        "            'byo-plugin', '', ('uvicorn',), ('asyncio',),\n"
        f"            kind='command', command={command!r}, routes=(contract.ROUTE_TEXT,),\n"
        "        )\n"
        "    ]\n",
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )

    listed = harness("list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["framework"]: row for row in json.loads(listed.stdout)}
    row = rows["byo-plugin"]
    assert row["origin"] == "plugin byo-e2e-plugin 1.0", row
    assert (row["kind"], row["routes"], row["available"]) == ("command", ["/"], True)
    assert "uvicorn" in row["versions"]
    assert rows["aiohttp"]["origin"] == "builtin"
    table = harness("list")
    assert (
        "plugin byo-e2e-plugin" in table.stdout.replace("\n", " ") or "byo-plugin" in table.stdout
    )

    results = tmp_path / "results"
    compared = harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--frameworks", "byo-plugin",
        "--out", str(results),
        timeout_s=240,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr
    run, _ = only_run(results)
    [case] = run.cases
    assert case.status == "ok", case.error
    assert case.summary.peak and case.summary.peak > 100
    assert case.verify["text"]["ok"] and "counter" not in case.verify  # declared routes
    assert run.config["servers"]["byo-plugin"]["origin"] == "plugin byo-e2e-plugin 1.0"


@pytest.fixture
def contenders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, ...]:
    """The contenders, registered through their entry point in the `harness` processes."""
    from servers.contenders import frameworks

    missing = {f.name: f.missing() for f in frameworks() if f.missing()}
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the contenders extra is not installed in CI: {missing}")
        pytest.skip(f"pip install serverbench-harness[contenders]: {missing}")
    path = contenders_path(tmp_path / "entry-points")
    if path is not None:
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH")]))
        )
    return CONTENDERS


@pytest.mark.timeout(LONG_TEST_S)
def test_the_contenders_pass_verify_on_the_routes_they_serve(contenders: tuple[str, ...]) -> None:
    require_ferretdb()
    sinks = ("empty", "file", "mongo")  # mongo: every sink option reaches a command's app
    verified = harness(
        "verify", "--frameworks", ",".join(contenders), "--no-backends",
        "--sinks", ",".join(sinks), "--json", timeout_s=400,
    )  # fmt: skip
    results = json.loads(verified.stdout)
    failed = [
        (r["framework"], r["sink"], c["name"], c["detail"])
        for r in results
        for c in r["checks"]
        if not c["ok"]
    ]
    assert verified.returncode == 0 and not failed, failed or verified.stderr
    by_name = {(r["framework"], r["sink"]): {c["name"]: c for c in r["checks"]} for r in results}
    assert set(by_name) == {(name, sink) for name in contenders for sink in sinks}
    for (_name, sink), checks in by_name.items():
        assert checks["text"]["supported"] and checks["log"]["supported"]
        if sink != "empty":
            assert checks["sink-record"]["ok"]
    assert not by_name[("granian", "empty")]["counter"]["supported"]
    for name in ("granian", "hypercorn"):  # the raw frames they declare, by their keys
        raw = by_name[(name, "empty")]["ws-raw-frames"]
        assert "; declared deviations: ws-unmasked-frame, " in raw["detail"]
        assert "deviating:" not in raw["detail"] and all(d["declared"] for d in raw["deviations"])
    for name in ("uvicorn-starlette", "gunicorn-gevent"):  # every WebSocket rule, held
        assert by_name[(name, "empty")]["ws-raw-frames"]["supported"]
        assert not by_name[(name, "empty")]["ws-raw-frames"]["deviations"]


# ~40 s: in the slow run; the default run verifies them on their routes (above) and
# measures a command server (test_a_command_given_with_server_is_verified_and_measured)
@pytest.mark.slow
@pytest.mark.timeout(LONG_TEST_S)
def test_the_contenders_are_measured_with_the_file_sink_and_lose_nothing(
    contenders: tuple[str, ...], tmp_path: Path
) -> None:
    require_tools("wrk")
    results = tmp_path / "results"
    compared = harness(
        "compare", "--profile", "smoke", "--frameworks", ",".join(contenders),
        "--scenario", "log", "--sink", "file", "--out", str(results), timeout_s=400,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr
    run, _ = only_run(results)
    assert [c.framework for c in run.cases] == list(contenders)
    for case in run.cases:
        assert case.status == "ok", (case.framework, case.error)
        assert case.summary.peak and case.summary.peak > 100
        assert case.reconcile and case.reconcile["lost"] == 0 and case.reconcile["stored"] > 0
        assert run.config["servers"][case.framework]["origin"].startswith("plugin ")


def test_a_process_forked_by_the_server_is_its_own_not_another_listener() -> None:
    """gunicorn forks its worker while the harness reads its tree: the worker holds the
    listener too, and must count as the server's (not 'another process listens')."""
    import signal
    import subprocess
    import time

    import psutil

    from servers.listeners import descends_from

    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, time\nos.fork()\ntime.sleep(30)"],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(parent.pid).children()):
            assert time.monotonic() < deadline, "the child never forked"
            time.sleep(0.02)
        assert descends_from(children[0].pid, parent.pid)
        assert descends_from(parent.pid, parent.pid)
        assert not descends_from(os.getpid(), parent.pid)
        assert not descends_from(None, parent.pid)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


# The same app as a new user writes it, with no header limit of its own: uvicorn's
# httptools parser takes 200 kB of headers, a robustness deviation, not a wrong answer.
PLAIN_ONE_FILE_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] != "/":
        status, body = 404, b"not found"
    else:
        status, body = 200, b"I am a stupid HTTP server!"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""


def uvicorn_app(directory: Path, module: str, source: str) -> tuple[str, Path]:
    """`source` written as `module`.py in `directory`; the stock-uvicorn command serving
    it, and where its runs go."""
    require_uvicorn()
    require_tools("wrk")
    (directory / f"{module}.py").write_text(source)
    command = (
        f"{sys.executable} -m uvicorn {module}:app --app-dir {directory} --host {{host}} "
        "--port {port}"
    )
    return command, directory / "results"


def smoke_compare(results: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`harness compare --profile smoke --frameworks NAME` into `results`, one short step."""
    return harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--frameworks", name,
        "--out", str(results), *extra, timeout_s=240,
    )  # fmt: skip


@pytest.mark.timeout(LONG_TEST_S)
def test_plain_uvicorn_is_measured_with_one_warning_and_fails_strict(tmp_path: Path) -> None:
    """Issue 24's new user: `--server 'mine=uvicorn mineapp:app ...'` is measured, exit 0,
    with one warning naming the deviation and its remedy; --strict-verify fails it with
    that one line; declaring the key in a servers file passes strict."""
    command, results = uvicorn_app(tmp_path, "mineapp", PLAIN_ONE_FILE_APP)

    def compare(*extra: str) -> subprocess.CompletedProcess[str]:
        return smoke_compare(results, "mine", *extra)

    measured = compare("--server", f"mine={command}")
    assert measured.returncode == 0, measured.stdout + measured.stderr
    warnings = [line for line in measured.stdout.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: mine: malformed oversized-headers: sent GET / with a 200,000-byte X-Big "
        "header; expected 400, 413 or 431 and nothing more on the connection; came 200 OK "
        '(one response); to accept it, declare it: deviations = { oversized-headers = "why" '
        "} in [servers.mine] of a servers file (--servers FILE)"
    ]
    run, run_dir = only_run(results)
    [case] = run.cases
    assert case.status == "ok" and case.summary.peak and case.warnings == 1
    [deviation] = case.deviations
    assert (deviation["key"], deviation["declared"]) == ("oversized-headers", None)
    assert "oversized-headers" in (run_dir / "report.html").read_text()

    strict = compare("--server", f"mine={command}", "--strict-verify")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    failed = [line for line in strict.stdout.splitlines() if line.startswith("failed:")]
    assert failed == [
        "failed: mine: verify failed: malformed: oversized-headers: sent GET / with a "
        "200,000-byte X-Big header; expected 400, 413 or 431 and nothing more on the "
        "connection; came 200 OK (one response); to accept it, declare it: deviations = { "
        'oversized-headers = "why" } in [servers.mine] of a servers file (--servers FILE)'
    ]

    servers = tmp_path / "servers.toml"
    servers.write_text(
        f"[servers.mine]\ncommand = {json.dumps(command)}\n"
        'deviations = { oversized-headers = "httptools has no header size limit" }\n'
    )
    declared = compare("--servers", str(servers), "--strict-verify")
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert "warning:" not in declared.stdout


# A one-file app that answers every request the same: the contract's `/`, rightly; every
# other route, path and method wrongly (200 with that body)
SAME_FOR_EVERYTHING_APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b"I am a stupid HTTP server!"
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""


@pytest.mark.timeout(LONG_TEST_S)
def test_wrong_answers_off_the_route_measured_are_warnings(tmp_path: Path) -> None:
    """A case measuring `/` fails only on `/`'s answers: the app's wrong /counter, /log,
    404 and 405 are warnings (one line each, keyed by the check), the server measured;
    --strict-verify fails them."""
    command, results = uvicorn_app(tmp_path, "sameapp", SAME_FOR_EVERYTHING_APP)

    def compare(*extra: str) -> subprocess.CompletedProcess[str]:
        return smoke_compare(results, "same", "--server", f"same={command}", *extra)

    measured = compare()
    assert measured.returncode == 0, measured.stdout + measured.stderr
    warned = {
        line.removeprefix("warning: same: ").split(":")[0].split()[-1]
        for line in measured.stdout.splitlines()
        if line.startswith("warning: same: ")
    }
    assert {"counter", "log", "not-found", "wrong-method"} <= warned, measured.stdout
    assert "warning: same: counter: sent GET /counter" in measured.stdout
    run, _ = only_run(results)
    [case] = run.cases
    assert case.status == "ok" and case.summary.peak
    assert {"counter", "log", "not-found", "wrong-method"} <= {d["key"] for d in case.deviations}

    strict = compare("--strict-verify")
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "failed: same: verify failed:" in strict.stdout and "counter: sent GET" in strict.stdout

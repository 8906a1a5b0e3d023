"""A server given as a command speaks what it negotiates: asked for h2 or h2c, a command
that did not declare its protocols is started and probed (harness.negotiation), measured
when it answers in HTTP/2 and skipped with what the probe found when it does not.

Each server is a one-file ASGI app on stock hypercorn or uvicorn, as a user runs it (no
{protocol} in any command); each load is the smoke profile's first h2load step, shortened
to a second.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from model.results import Run, read_run
from tests.helpers import ONE_STEP_SMOKE, harness, require_tools

# the contract's `/` and nothing else, as a user would write it
ONE_FILE_APP = """
BODY = b"I am a stupid HTTP server!"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    status, body = 200, BODY
    if scope["path"] != "/":
        status, body = 404, b"not found"
    elif scope["method"] not in ("GET", "HEAD"):
        status, body = 405, b""
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""
# the command of the README's example, on the run's certificate
HYPERCORN_TLS = " --bind {host}:{port} --certfile {tls_cert} --keyfile {tls_key}"
COMPARE_TIMEOUT_S = 240


def write_app(directory: Path) -> Path:
    pytest.importorskip("hypercorn", reason="pip install serverbench-harness[contenders]")
    require_tools("h2load")
    path = directory / "app.py"
    path.write_text(ONE_FILE_APP)
    return path


def hypercorn(app: Path, tail: str) -> str:
    return f"{sys.executable} -m hypercorn {app}:app{tail}"


def compare(results: Path, frameworks: str, protocol: str, *options: str) -> Run:
    done = harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--frameworks", frameworks,
        "--protocol", protocol, "--out", str(results), *options, timeout_s=COMPARE_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = list(results.iterdir())
    return read_run(run_dir)


@pytest.mark.timeout(COMPARE_TIMEOUT_S + 60)
def test_a_command_is_measured_over_h2_when_alpn_chooses_it_and_skipped_when_not(
    tmp_path: Path,
) -> None:
    app = write_app(tmp_path)
    # hypercorn told to offer http/1.1 only, in a servers file entry without `protocols`
    (tmp_path / "h1.toml").write_text('alpn_protocols = ["http/1.1"]\n')
    h1only = hypercorn(app, HYPERCORN_TLS).replace(
        " -m hypercorn ", f" -m hypercorn -c {tmp_path}/h1.toml "
    )
    servers = tmp_path / "servers.toml"
    servers.write_text(f"[servers.h1only]\ncommand = {h1only!r}\n")
    run = compare(
        tmp_path / "results", "mine,h1only", "h2",
        "--server", "mine=" + hypercorn(app, HYPERCORN_TLS), "--servers", str(servers),
    )  # fmt: skip
    mine, h1 = run.cases
    assert (mine.framework, mine.protocol, mine.status) == ("mine", "h2", "ok"), mine.error
    assert mine.negotiated is not None and mine.negotiated.alpn == "h2"
    assert mine.summary.peak and mine.summary.peak > 0
    assert all(step.errors["total"] == 0 for step in mine.steps)
    assert (h1.framework, h1.status, h1.steps) == ("h1only", "skipped", ())
    assert h1.error == "not supported: h1only: ALPN chose http/1.1, not h2"
    # verify probes it too before its checks: skipped with the same finding
    verified = harness(
        "verify", "--frameworks", "h1only", "--protocol", "h2", "--no-backends", "--json",
        "--servers", str(servers),
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr
    [result] = json.loads(verified.stdout)
    assert result["skipped"] == "h1only: ALPN chose http/1.1, not h2"


@pytest.mark.timeout(COMPARE_TIMEOUT_S + 60)
def test_a_command_is_measured_over_h2c_when_it_answers_the_preface(tmp_path: Path) -> None:
    app = write_app(tmp_path)
    pytest.importorskip("uvicorn", reason="pip install serverbench-harness[contenders]")
    uvicorn = (
        f"{sys.executable} -m uvicorn app:app --app-dir {tmp_path} "
        "--host {host} --port {port} --no-access-log"
    )
    clear_command = hypercorn(app, " --bind {host}:{port}")  # cleartext: h1 and h2c
    run = compare(
        tmp_path / "results", "clear,h11", "h2c",
        "--server", f"clear={clear_command}", "--server", f"h11={uvicorn}",
    )  # fmt: skip
    clear, h11 = run.cases
    assert (clear.protocol, clear.status) == ("h2c", "ok"), clear.error
    assert all(step.errors["total"] == 0 for step in clear.steps)
    assert (h11.status, h11.steps) == ("skipped", ())
    assert h11.error == (
        "not supported: h11: answered the h2 preface with 'HTTP/1.1 400 Bad Request', not h2c"
    )

"""Protocols end to end: servers started on h1-tls and h2c by the harness, TLS facts read
by its probe connection, and `harness compare --protocol` runs over a TLS command server.

The TLS server here is stock uvicorn given as a command (`--ssl-certfile {tls_cert}`), so
these tests do not wait for our own servers' TLS; every certificate is a throwaway one
(harness.tls) and every connection goes to 127.0.0.1.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.compare import build_plan
from harness.frameworks import register_servers
from harness.run import Runner
from harness.run_options import RunOptions
from harness.server_process import start_server
from harness.tls import h2c_answers, make_certificates, probe_tls, user_certificates
from model.errors import UserError
from model.results import read_run
from servers import contract
from tests.helpers import ONE_STEP_SMOKE, fresh_registry, harness, require_tools

# A one-file ASGI app as a user would write it (tests/e2e/test_byo_servers.py has its twin):
# the contract's `/`, other paths 404, other methods 405, oversized headers 431.
ASGI_APP = """
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


UVICORN_TLS12 = "stock uvicorn's SSL context accepts TLS 1.2; its --ssl-version sets no minimum"


def require_uvicorn() -> None:
    pytest.importorskip("uvicorn", reason="pip install serverbench-harness[contenders]")


def uvicorn_command(directory: Path, *, tls: bool) -> str:
    """uvicorn serving ASGI_APP from `directory`; with `tls`, on the run's certificate
    (uvicorn serves cleartext when {tls_cert} and {tls_key} are filled with "")."""
    (directory / "tlsapp.py").write_text(ASGI_APP)
    command = (
        f"{sys.executable} -m uvicorn tlsapp:app --app-dir {directory} "
        "--host {host} --port {port} --no-access-log"
    )
    return command + (" --ssl-certfile {tls_cert} --ssl-keyfile {tls_key}" if tls else "")


def get_body(url: str, ca_path: Path | None = None) -> bytes:
    context = ssl.create_default_context(cafile=str(ca_path)) if ca_path else None
    with urllib.request.urlopen(url + "/", timeout=5, context=context) as reply:
        return reply.read()


def test_a_tls_command_is_started_on_h1_tls_and_on_h1(tmp_path: Path) -> None:
    require_uvicorn()
    certificates = make_certificates(tmp_path / "tls")
    with fresh_registry():
        register_servers([f"tlsapp={uvicorn_command(tmp_path, tls=True)}"])
        with start_server("tlsapp", protocol="h1-tls", certificates=certificates) as server:
            assert server.url.startswith("https://127.0.0.1:")
            assert get_body(server.url, certificates.ca_path) == contract.TEXT_BODY
            facts = probe_tls(server.host, server.port, "h1-tls", certificates)
            # a user's own certificate (no CA given): trusted as it is, its name unchecked
            own = user_certificates(str(certificates.cert_path), str(certificates.key_path))
            assert probe_tls(server.host, server.port, "h1-tls", own)["version"] == "TLSv1.3"
            other = make_certificates(tmp_path / "other")  # another CA's: not trusted
            with pytest.raises(ssl.SSLCertVerificationError):
                probe_tls(server.host, server.port, "h1-tls", other)
        assert facts["version"] == "TLSv1.3"
        assert facts["key_type"] == certificates.key_type
        assert facts["cipher"].startswith("TLS_")
        with start_server("tlsapp", certificates=certificates) as server:
            assert server.url.startswith("http://127.0.0.1:")
            assert get_body(server.url) == contract.TEXT_BODY


def test_a_command_without_tls_placeholders_is_refused_h1_tls(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "tls")
    with fresh_registry():
        register_servers([f"plainapp={uvicorn_command(tmp_path, tls=False)}"])
        with pytest.raises(UserError, match=r"^not supported: .*\{tls_cert\}"):
            start_server("plainapp", protocol="h1-tls", certificates=certificates)


def only_run(results: Path):
    [run_dir] = list(results.iterdir())
    return read_run(run_dir), run_dir


def test_compare_on_h1_and_h1_tls_gives_a_case_each_with_what_tls_negotiated(
    tmp_path: Path,
) -> None:
    require_uvicorn()
    require_tools("wrk")
    servers = tmp_path / "servers.toml"
    # stock uvicorn's SSL context takes TLS 1.2 too (the contract's minimum is 1.3): said,
    # as a known deviation, so that verify reports it instead of failing the case
    servers.write_text(
        f"[servers.tlsapp]\ncommand = {json.dumps(uvicorn_command(tmp_path, tls=True))}\n"
        f'deviations = {{ "tls-1.2-refused" = {json.dumps(UVICORN_TLS12)} }}\n'
    )
    out = tmp_path / "results"
    done = harness(
        "compare", "--frameworks", "tlsapp", "--servers", str(servers), "--protocol", "h1,h1-tls",
        "--profile", "smoke", *ONE_STEP_SMOKE, "--out", str(out), timeout_s=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run, run_dir = only_run(out)
    assert [(c.framework, c.protocol, c.status) for c in run.cases] == [
        ("tlsapp", "h1", "ok"),
        ("tlsapp", "h1-tls", "ok"),
    ], [c.error for c in run.cases]
    plain, tls = run.cases
    assert plain.negotiated is None and "protocol" not in plain.verify
    assert tls.negotiated is not None
    assert tls.negotiated.tls_version == "TLSv1.3"
    assert tls.negotiated.cipher and tls.negotiated.cipher.startswith("TLS_")
    assert tls.negotiated.key_type == "ECDSA P-256"  # trustme's
    assert tls.verify["protocol"]["ok"], tls.verify
    # verify spoke h1-tls: the routes and TLS's own checks, the known deviation reported
    assert {"text", "not-found", "tls-handshake", "tls-plaintext"} <= set(tls.verify)
    assert "tls-half-handshake" not in tls.verify  # harness verify --protocol's alone
    assert "known deviation" in tls.verify["tls-1.2-refused"]["detail"]
    assert not any(name.startswith("tls-") for name in plain.verify)
    for case in run.cases:
        assert all(step.achieved > 50 and step.errors["total"] == 0 for step in case.steps)
        assert all(step.probe_ms is not None for step in case.steps)  # h1-tls is probed too
    assert tls.summary.tls_tax is not None and tls.summary.tls_tax > 0
    written = json.loads((run_dir / "run.json").read_text())
    assert [c["protocol"] for c in written["cases"]] == ["h1", "h1-tls"]
    assert written["cases"][1]["negotiated"]["tls_version"] == "TLSv1.3"
    assert (run_dir / plain.key).is_dir() and (run_dir / tls.key).is_dir()
    assert tls.key.endswith("_h1-tls") and not plain.key.endswith("_h1")
    assert written["config"]["tls"] == {
        "certificate": "a throwaway CA's (trustme)",
        "key_type": "ECDSA P-256",
    }
    assert written["config"]["profile"]["protocol"] == "h1,h1-tls"
    assert "h1-tls" in done.stdout and "TLS tax" in done.stdout


def test_a_protocol_a_server_does_not_speak_is_skipped_not_supported(tmp_path: Path) -> None:
    require_uvicorn()
    require_tools("wrk")
    server = f"plainapp={uvicorn_command(tmp_path, tls=False)}"
    out = tmp_path / "results"
    done = harness(
        "compare", "--frameworks", "plainapp", "--server", server, "--protocol", "h1,h1-tls",
        "--profile", "smoke", *ONE_STEP_SMOKE, "--out", str(out), timeout_s=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run, _ = only_run(out)
    plain, tls = run.cases
    assert (plain.protocol, plain.status) == ("h1", "ok")
    assert (tls.protocol, tls.status, tls.steps) == ("h1-tls", "skipped", ())
    assert tls.error == (
        "not supported: plainapp's command does not declare h1-tls (it needs {tls_cert}, {tls_key})"
    )


def test_compare_over_h2_skips_a_server_without_it_and_records_alpn_h2(tmp_path: Path) -> None:
    require_uvicorn()
    require_tools("h2load", "nginx")
    server = f"plainapp={uvicorn_command(tmp_path, tls=False)}"
    out = tmp_path / "results"
    done = harness(
        "compare", "--frameworks", "plainapp,nginx", "--server", server, "--protocol", "h2",
        "--profile", "smoke", *ONE_STEP_SMOKE, "--out", str(out), timeout_s=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # the profile's wrk does not speak h2: the run takes h2load and says so (no --driver)
    note = "note: driver h2load: the profile's wrk does not speak h2 (--driver chooses another)"
    assert note in done.stdout
    run, _ = only_run(out)
    assert {case.driver for case in run.cases} == {"h2load"}
    plain, nginx = run.cases
    assert (plain.protocol, plain.status, plain.steps) == ("h2", "skipped", ())
    assert plain.error is not None and plain.error.startswith("not supported: plainapp")
    assert (nginx.protocol, nginx.status) == ("h2", "ok"), nginx.error
    assert nginx.negotiated is not None
    assert (nginx.negotiated.alpn, nginx.negotiated.tls_version) == ("h2", "TLSv1.3")
    assert nginx.negotiated.ca_trusted is False  # h2load verifies no certificate
    assert all(step.figures.negotiated == "h2" for step in nginx.steps)


def test_the_runner_skips_h2_on_a_server_without_it_and_never_starts_it(tmp_path: Path) -> None:
    """h2 needs a driver that speaks it (build_plan refuses wrk); the runner's own rule is
    checked on a plan made directly: the case is skipped before any server starts."""
    require_uvicorn()
    with fresh_registry():
        register_servers([f"plainapp={uvicorn_command(tmp_path, tls=False)}"])
        plan = build_plan(RunOptions(
            frameworks="plainapp", profile="smoke", results_dir=tmp_path / "results",
        ))  # fmt: skip
        profile = dataclasses.replace(plan.profile, protocol="h2")
        run = Runner(dataclasses.replace(plan, profile=profile)).run()
    [case] = run.cases
    assert (case.protocol, case.status, case.verify) == ("h2", "skipped", {})
    assert case.error is not None and case.error.startswith("not supported: plainapp's command ")
    assert "h2" in case.error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--protocol", "h1-tls", "--driver", "ab"], "driver ab does not speak h1-tls"),
        (["--protocol", "h3"], "protocol h3 is not one of h1, h1-tls, h2, h2c"),
        (["--protocol", "h1-tls", "--tls-cert", "/nonexistent.pem", "--tls-key", "/x.key"],
         "--tls-cert /nonexistent.pem: no such file"),
        (["--protocol", "h1-tls", "--tls-cert", "/etc/hostname"], "go together"),
        (["--protocol", "h1-tls", "--tls-cert", "/etc/hostname", "--tls-key", "/etc/hostname"],
         "--tls-cert /etc/hostname: not a PEM certificate"),
    ],
)  # fmt: skip
def test_protocol_mistakes_get_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", "--out", str(tmp_path), *args
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(tmp_path.iterdir())  # refused before a run directory was made


def test_a_certificate_that_does_not_match_its_key_gets_one_line(tmp_path: Path) -> None:
    first = make_certificates(tmp_path / "a")
    second = make_certificates(tmp_path / "b")
    done = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", "--protocol", "h1-tls",
        "--tls-cert", str(first.cert_path), "--tls-key", str(second.key_path),
        "--out", str(tmp_path / "results"),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        f"--tls-cert {first.cert_path} with --tls-key {second.key_path}: key values mismatch"
        in done.stderr
    )
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_harness_list_names_each_servers_protocols_and_why_not_the_others(tmp_path: Path) -> None:
    server = f"tlsapp={uvicorn_command(tmp_path, tls=True)}"
    listed = harness("list", "--json", "--server", server)
    assert listed.returncode == 0, listed.stderr
    rows = {row["framework"]: row for row in json.loads(listed.stdout)}
    # h2 and h2c on trial: started and probed when a run asks for them (harness.negotiation)
    assert rows["tlsapp"]["protocols"] == ["h1", "h1-tls", "h2", "h2c"]
    assert rows["tlsapp"]["probed_protocols"] == ["h2", "h2c"]
    assert rows["tlsapp"]["not_supported"] == {}
    for row in rows.values():
        assert "h1" in row["protocols"]
        assert set(row["protocols"]) | set(row["not_supported"]) == set(contract.PROTOCOLS)
    table = harness("list", "--server", server, "--protocol", "h2c")
    assert table.returncode == 0, table.stderr
    assert "skipped: not" in table.stdout and "(probed)" in table.stdout
    wrong = harness("list", "--protocol", "h3")
    assert wrong.returncode == 1 and "--protocol: protocol h3 is not one of" in wrong.stderr


# ~25 s: in the slow run; the default run compares over each protocol (above)
@pytest.mark.slow
def test_bench_runs_ours_and_the_minimal_app_on_each_protocol(tmp_path: Path) -> None:
    require_uvicorn()
    require_tools("wrk")
    command = uvicorn_command(tmp_path, tls=True)
    servers_file = tmp_path / "servers.toml"
    servers_file.write_text(
        f"[servers.tlsapp]\ncommand = {json.dumps(command)}\nminimal = {json.dumps(command)}\n"
    )
    done = harness(
        "bench", "--frameworks", "tlsapp", "--servers", str(servers_file), "--protocol",
        "h1,h1-tls", "--duration", "1", "--rounds", "2", "--precision", "0", "--connections", "10",
        "--json", "--results", str(tmp_path / "results"),
        timeout_s=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout)
    assert [(r["framework"], r["protocol"]) for r in results] == [
        ("tlsapp", "h1"),
        ("tlsapp", "h1-tls"),
    ]
    assert all(r["ours_requests_per_s"] > 0 and r["minimal_requests_per_s"] > 0 for r in results)
    # a minimal app that speaks h1 only is said so, in one line, before anything starts
    refused = harness("bench", "--frameworks", "aiohttp", "--protocol", "h1-tls")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "not supported" in refused.stdout + refused.stderr


def test_an_h2c_command_is_ready_and_answers_the_http2_preface(tmp_path: Path) -> None:
    """hypercorn speaks HTTP/2 with prior knowledge on its cleartext port; uvicorn does not."""
    pytest.importorskip("hypercorn", reason="pip install serverbench-harness[contenders]")
    require_uvicorn()
    (tmp_path / "tlsapp.py").write_text(ASGI_APP)
    # {protocol} tells a command which protocol to speak; hypercorn needs no telling
    command = (
        f"env SERVERBENCH_PROTOCOL={{protocol}} PYTHONPATH={tmp_path} {sys.executable} "
        "-m hypercorn --bind {host}:{port} tlsapp:app"
    )
    with fresh_registry():
        table = {"h2capp": {"command": command, "protocols": ["h2c"]}}
        register_servers([f"plainapp={uvicorn_command(tmp_path, tls=False)}"], table=table)
        with start_server("h2capp", protocol="h2c") as server:
            assert server.url.startswith("http://")
            assert h2c_answers(server.host, server.port)
        with start_server("plainapp") as server:
            assert not h2c_answers(server.host, server.port)

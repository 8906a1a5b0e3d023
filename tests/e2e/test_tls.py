"""Protocols end to end: servers started on h1-tls and h2c by the harness, TLS facts read
by its probe connection, and `harness compare --protocol` runs over a TLS command server.

The TLS server here is stock uvicorn given as a command (`--ssl-certfile {tls_cert}`), so
these tests do not wait for our own servers' TLS; every certificate is a throwaway one
(harness.tls) and every connection goes to 127.0.0.1.
"""

from __future__ import annotations

import ssl
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.frameworks import register_servers
from harness.server_process import start_server
from harness.tls import make_certificates, probe_tls
from model.errors import UserError
from servers import contract
from tests.helpers import fresh_registry

# the contract's `/` on plain ASGI: enough for a server given as a command
ASGI_APP = """
BODY = b"I am a stupid HTTP server!"


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    status, body = (200, BODY) if scope["path"] == "/" else (404, b"not found")
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""


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

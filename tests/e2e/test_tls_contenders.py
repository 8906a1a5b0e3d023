"""TLS and HTTP/2 on the contenders (servers.contenders): each stock server started from its
own command template, `{protocol}`, `{tls_cert}` and `{tls_key}` filled as the harness
fills them, and spoken to by clients trusting only the run's throwaway CA.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import Iterator

import httpx
import pytest
import websockets

from harness.server_process import CommandServerProcess, start_command_server
from harness.tls import Certificates, temporary_certificates
from servers import FRAMEWORKS, Framework, contract
from servers.contenders import frameworks as contender_frameworks
from servers.plugins import load_plugins
from tests.helpers import require_framework

CONTENDERS = tuple(f.name for f in contender_frameworks())
TIMEOUT_S = 5.0


def contender(name: str) -> Framework:
    """The installed entry (the plugin registers it), skipped when not installed."""
    load_plugins()
    if name not in FRAMEWORKS:
        pytest.skip(f"{name} is not registered (pip install -e '.[contenders]')")
    require_framework(name)
    return FRAMEWORKS[name]


def cases(protocol: str) -> list[str]:
    return [f.name for f in contender_frameworks() if protocol in f.protocols]


@pytest.fixture(scope="module")
def certificates() -> Iterator[Certificates]:
    holder, made = temporary_certificates()
    with holder:
        yield made


def client_context(certificates: Certificates, alpn: list[str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    context.set_alpn_protocols(alpn)
    return context


def handshake(port: int, context: ssl.SSLContext) -> tuple[str, str | None]:
    """(TLS version, selected ALPN protocol) of one handshake."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        return str(tls.version()), tls.selected_alpn_protocol()


def start_speaking(
    framework: Framework, template: str, protocol: str, certificates: Certificates
) -> CommandServerProcess:
    """`template` started on `protocol`, as the harness starts it: ready once it answers in
    that protocol (a TLS handshake trusting the CA; h2c: the preface answered)."""
    return start_command_server(
        framework,
        template,
        protocol=protocol,
        certificates=certificates if protocol in contract.TLS_PROTOCOLS else None,
    )


@pytest.fixture(params=cases(contract.PROTOCOL_H1_TLS), scope="module")
def h1_tls(request: pytest.FixtureRequest, certificates) -> Iterator[CommandServerProcess]:
    framework = contender(request.param)
    server = start_speaking(framework, framework.command, contract.PROTOCOL_H1_TLS, certificates)
    with server:
        yield server


def test_h1_tls_is_tls13_and_alpn_http11(h1_tls, certificates) -> None:
    version, alpn = handshake(h1_tls.port, client_context(certificates, ["h2", "http/1.1"]))
    assert version == contract.TLS_MINIMUM_VERSION
    assert alpn == "http/1.1"


def test_tls12_refused_or_a_known_deviation(h1_tls, certificates) -> None:
    """TLS 1.2 is refused, unless the server's deviations say it cannot be (and it is not)."""
    context = client_context(certificates, ["http/1.1"])
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        handshake(h1_tls.port, context)
        accepted = True
    except ssl.SSLError:
        accepted = False
    deviation = FRAMEWORKS[h1_tls.framework].deviations.get("tls-1.2-refused")
    assert accepted == (deviation is not None), deviation or "TLS 1.2 accepted"


def test_h1_tls_routes_and_wss(h1_tls, certificates) -> None:
    context = client_context(certificates, ["http/1.1"])
    base = f"https://localhost:{h1_tls.port}"
    with httpx.Client(base_url=base, verify=context, timeout=TIMEOUT_S) as client:
        text = client.get(contract.ROUTE_TEXT)
        assert (text.status_code, text.content, text.http_version) == (
            200,
            contract.TEXT_BODY,
            "HTTP/1.1",
        )
        logged = client.post(contract.ROUTE_LOG, content=b'{"over": "tls"}')
        assert (logged.status_code, logged.content) == (200, contract.LOG_REPLY_BODY)

    async def wss() -> tuple[str | None, int | None]:
        async with websockets.connect(
            f"wss://127.0.0.1:{h1_tls.port}{contract.ROUTE_WEBSOCKET}",
            ssl=context,
            server_hostname="localhost",
            origin=contract.WS_ORIGIN,
            subprotocols=[contract.WS_SUBPROTOCOL],
            open_timeout=TIMEOUT_S,
            close_timeout=TIMEOUT_S,
        ) as ws:
            await ws.send(json.dumps({"n": 1}))
            await ws.send("not json")
            await asyncio.wait_for(ws.wait_closed(), TIMEOUT_S)
            return ws.subprotocol, ws.close_code

    subprotocol, close_code = asyncio.run(wss())
    assert subprotocol == contract.WS_SUBPROTOCOL
    assert close_code == contract.WS_CLOSE_INVALID_PAYLOAD


@pytest.mark.parametrize("name", cases(contract.PROTOCOL_H2))
def test_h2(name: str, certificates) -> None:
    framework = contender(name)
    with start_speaking(framework, framework.command, contract.PROTOCOL_H2, certificates) as server:
        context = client_context(certificates, ["h2", "http/1.1"])
        assert handshake(server.port, context) == (contract.TLS_MINIMUM_VERSION, "h2")
        with httpx.Client(
            base_url=f"https://localhost:{server.port}",
            http1=False,
            http2=True,
            verify=context,
            timeout=TIMEOUT_S,
        ) as client:
            for _ in range(3):
                text = client.get(contract.ROUTE_TEXT)
                assert (text.http_version, text.status_code, text.content) == (
                    "HTTP/2",
                    200,
                    contract.TEXT_BODY,
                )
            logged = client.post(contract.ROUTE_LOG, content=b'{"over": "h2"}')
            assert (logged.status_code, logged.content) == (200, contract.LOG_REPLY_BODY)


@pytest.mark.parametrize("name", cases(contract.PROTOCOL_H2C))
def test_h2c_prior_knowledge(name: str, certificates) -> None:
    framework = contender(name)
    with (
        start_speaking(framework, framework.command, contract.PROTOCOL_H2C, certificates) as server,
        httpx.Client(http1=False, http2=True, timeout=TIMEOUT_S) as client,
    ):
        text = client.get(f"http://127.0.0.1:{server.port}{contract.ROUTE_TEXT}")
        assert (text.http_version, text.status_code, text.content) == (
            "HTTP/2",
            200,
            contract.TEXT_BODY,
        )


@pytest.mark.parametrize(
    ("name", "protocol"),
    [(f.name, p) for f in contender_frameworks() for p in f.protocols if p != contract.PROTOCOL_H1],
)
def test_minimal_app_speaks_each_protocol(name: str, protocol: str, certificates) -> None:
    """`harness bench`'s minimal app takes the same protocol placeholders."""
    framework = contender(name)
    server = start_speaking(framework, framework.minimal_command, protocol, certificates)
    with server:
        tls = protocol in contract.TLS_PROTOCOLS
        verify = (
            client_context(certificates, [contract.ALPN_FOR_PROTOCOL[protocol]]) if tls else False
        )
        http2 = protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C)
        with httpx.Client(http1=not http2, http2=http2, verify=verify, timeout=TIMEOUT_S) as client:
            reply = client.get(f"{'https' if tls else 'http'}://localhost:{server.port}/")
        assert (reply.status_code, reply.content) == (200, contract.TEXT_BODY)
        assert reply.http_version == ("HTTP/2" if http2 else "HTTP/1.1")


# -- the one contract checker over each protocol a contender speaks ----------------------
# (tests/e2e/test_conformance.py runs it over the builtin servers; the contenders are
# plugins, so here: every TLS and HTTP/2 check, a known deviation reported, not failed)
VERIFIED = [
    (name, protocol)
    for name in CONTENDERS
    for protocol in contract.PROTOCOLS
    if protocol != contract.PROTOCOL_H1
]
# By default one contender over h1-tls (uvicorn: the WebSocket refusals over TLS that once
# hung a check) and one over h2 (TLS and HTTP/2 checks in one); -m slow runs every
# contender over every protocol (~25 s each). test_h2 and test_h2c check each one's
# protocols by default.
DEFAULT_VERIFIED = {
    ("uvicorn-starlette", contract.PROTOCOL_H1_TLS),
    ("hypercorn", contract.PROTOCOL_H2),
}


def _verified_param(name: str, protocol: str) -> object:
    marks = [] if (name, protocol) in DEFAULT_VERIFIED else [pytest.mark.slow]
    return pytest.param(name, protocol, marks=marks, id=f"{name}-{protocol}")


# every check of the contract over the protocol: ~25 s alone here, past the default 120 s
# once on a machine running other tests beside it
VERIFY_TIMEOUT_S = 300


@pytest.mark.timeout(VERIFY_TIMEOUT_S)
@pytest.mark.parametrize(("name", "protocol"), [_verified_param(*row) for row in VERIFIED])
def test_verify_over_each_protocol(name: str, protocol: str, certificates) -> None:
    from harness.verify import verify_framework

    load_plugins()
    require_framework(name)
    verification = verify_framework(name, protocol=protocol, certificates=certificates)
    if protocol not in FRAMEWORKS[name].protocols:
        assert verification.skipped == FRAMEWORKS[name].why_not(protocol)
        return
    assert verification.error is None, verification.error
    # the WebSocket rules over wss lose a close frame to a reset now and then on a busy
    # machine (1006 for 1009; a handshake after the 1 MiB message timing out), on our
    # servers too (test_conformance: intermittent): judged there, not here
    failed = [
        (c.name, c.detail)
        for c in verification.checks
        if not c.ok and not (protocol == contract.PROTOCOL_H1_TLS and c.name.startswith("ws-"))
    ]
    assert not failed, failed
    names = {c.name for c in verification.checks}
    if protocol in contract.TLS_PROTOCOLS:
        assert {"tls-handshake", "tls-1.2-refused", "tls-plaintext"} <= names
    if protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C):
        assert {"h2-settings", "h2-concurrent-streams", "h2-reset-stream"} <= names

"""A close that fails a WebSocket while its client is still sending reaches the client.

verify's ws-1009 check sends a message over 1 MiB; the server refuses it at its frame header
and closes with 1009 while the payload is still coming. A server that then closed its
socket on the unread payload reset the connection, and over TLS the client's send failed
before its reader took the close frame: it recorded 1006 (30 checks each: gevent 5,
tornado 3, aiohttp 2). The servers linger instead (servers.core.websocket.WS_LINGER_S):
each of ROUNDS checks in a row gets its 1009, on every server serving /ws, in cleartext
and over TLS.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.server_process import ServerProcess, start_server
from harness.tls import Certificates, make_certificates
from harness.verify import CheckFailed
from harness.verify.endpoint import Endpoint, endpoint_for
from harness.verify.websocket import check_websocket_too_big
from servers import FRAMEWORKS, contract
from tests.helpers import require_framework, servers_serving

ROUNDS = 50


def _loops(name: str) -> list[str | None]:
    """The server's own loop (None), and uvloop where it runs on it too (its TLS transport
    closes otherwise than asyncio's)."""
    return [None, "uvloop"] if "uvloop" in FRAMEWORKS[name].loops else [None]


CASES = [
    pytest.param((name, protocol, loop), id="-".join(filter(None, (name, protocol, loop))))
    for name in servers_serving(contract.ROUTE_WEBSOCKET)
    for loop in _loops(name)
    for protocol in (contract.PROTOCOL_H1, contract.PROTOCOL_H1_TLS)
    if protocol in FRAMEWORKS[name].protocols
]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(Path(tmp_path_factory.mktemp("tls")))


@pytest.fixture(params=CASES)
def endpoint(request: pytest.FixtureRequest, certificates: Certificates) -> Iterator[Endpoint]:
    name, protocol, loop = request.param
    require_framework(name)
    tls = certificates if protocol in contract.TLS_PROTOCOLS else None
    server: ServerProcess
    with start_server(name, protocol=protocol, certificates=tls, loop=loop) as server:
        yield endpoint_for(server.url, protocol, tls)


def test_an_oversized_message_gets_its_1009_every_time(endpoint: Endpoint) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    for _ in range(ROUNDS):
        try:
            check_websocket_too_big(endpoint)
            outcomes["1009"] += 1
        except CheckFailed as failure:
            outcomes[str(failure)] += 1
    assert outcomes == {"1009": ROUNDS}, outcomes

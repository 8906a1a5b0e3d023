"""The memcached checks: `/mc/{key}` over HTTP, and `python -m servers`' own memcached
socket service (--mc-socket-port) spoken raw."""

from __future__ import annotations

import socket

from harness.verify.endpoint import EndpointOrUrl, http_client
from harness.verify.failure import expect
from harness.verify.wire import address, read_until
from model.scenarios import MC_KEY, MC_VALUE
from servers import contract


def check_memcached_route(server: EndpointOrUrl) -> str:
    """`/mc/{key}`: a hit is the 100-byte value; a miss and a key too long are 404."""
    with http_client(server, 10) as client:
        hit = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        expect(hit.status_code == 200 and hit.content == MC_VALUE, f"hit: {hit.status_code}")
        length = hit.headers.get("content-length")
        expect(length == str(contract.MC_VALUE_BYTES), f"hit: Content-Length {length}")
        miss = client.get(contract.ROUTE_MEMCACHED_PREFIX + "verify-missing-key")
        expect(miss.status_code == 404, f"a miss answered {miss.status_code}")
        too_long = client.get(
            contract.ROUTE_MEMCACHED_PREFIX + "k" * (contract.MC_MAX_KEY_BYTES + 1)
        )
        expect(too_long.status_code == 404, f"a key too long answered {too_long.status_code}")
    return "hit returns the 100-byte value; a miss and a key too long 404"


def check_memcached_socket(server: EndpointOrUrl, mc_port: int) -> str:
    """The socket service: a hit, a miss, three gets in one write answered in order, an
    unknown command, and `quit`."""
    expect(mc_port > 0, "no mc_port in the telemetry line")
    key = MC_KEY.encode()
    hit = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(MC_VALUE), MC_VALUE)
    with socket.create_connection((address(server)[0], mc_port), 5) as sock:
        sock.sendall(b"get " + key + b"\r\n")
        expect((got := read_until(sock, b"END\r\n")) == hit, f"a hit answered {got[:60]!r}")
        sock.sendall(b"get nothing-here\r\n")
        expect((got := read_until(sock, b"END\r\n")) == b"END\r\n", f"a miss: {got[:60]!r}")
        sock.sendall(b"get " + key + b"\r\nget nothing-here\r\nget " + key + b"\r\n")
        got = read_until(sock, b"END\r\n", 3)
        expect(got == hit + b"END\r\n" + hit, f"three gets in one write: {got[:60]!r}")
        sock.sendall(b"set x 0 0 1\r\n")
        expect((got := read_until(sock, b"\r\n")) == b"ERROR\r\n", f"set answered {got!r}")
        sock.sendall(b"quit\r\n")
        expect(sock.recv(100) == b"", "quit left the connection open")
    return f"get hit, miss, three in one write, ERROR, quit on port {mc_port}"

"""The memcached checks: `/mc/{key}` over HTTP, and `python -m servers`' own memcached
socket service (--mc-socket-port) spoken raw."""

from __future__ import annotations

import socket

from harness.verify.endpoint import EndpointOrUrl, http_client
from harness.verify.failure import excerpt, expect
from harness.verify.wire import address, read_until
from model.scenarios import MC_KEY, MC_VALUE
from servers import contract


def check_memcached_route(server: EndpointOrUrl) -> str:
    """`/mc/{key}`: a hit is the 100-byte value; a miss and a key too long are 404."""
    with http_client(server, 10) as client:
        hit_sent = f"GET {contract.ROUTE_MEMCACHED_PREFIX}{MC_KEY} (a key memcached holds)"
        hit = client.get(contract.ROUTE_MEMCACHED_PREFIX + MC_KEY)
        expect(
            hit.status_code == 200 and hit.content == MC_VALUE,
            sent=hit_sent,
            expected=f"200 with the {contract.MC_VALUE_BYTES}-byte value",
            came=f"{hit.status_code} with {excerpt(hit.content)}",
        )
        length = hit.headers.get("content-length")
        expect(
            length == str(contract.MC_VALUE_BYTES),
            sent=hit_sent,
            expected=f"Content-Length {contract.MC_VALUE_BYTES}",
            came=f"Content-Length {length!r}",
        )
        miss = client.get(contract.ROUTE_MEMCACHED_PREFIX + "verify-missing-key")
        expect(
            miss.status_code == 404,
            sent=f"GET {contract.ROUTE_MEMCACHED_PREFIX}verify-missing-key (a miss)",
            expected="404",
            came=f"status {miss.status_code}",
        )
        too_long = client.get(
            contract.ROUTE_MEMCACHED_PREFIX + "k" * (contract.MC_MAX_KEY_BYTES + 1)
        )
        expect(
            too_long.status_code == 404,
            sent=f"GET {contract.ROUTE_MEMCACHED_PREFIX} with a key of "
            f"{contract.MC_MAX_KEY_BYTES + 1} bytes (too long)",
            expected="404",
            came=f"status {too_long.status_code}",
        )
    return "hit returns the 100-byte value; a miss and a key too long 404"


def check_memcached_socket(server: EndpointOrUrl, mc_port: int) -> str:
    """The socket service: a hit, a miss, three gets in one write answered in order, an
    unknown command, and `quit`."""
    expect(
        mc_port > 0,
        sent="nothing (the port is read from the server's telemetry line)",
        expected="mc_port in the telemetry line",
        came="no mc_port",
    )
    key = MC_KEY.encode()
    hit = b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(MC_VALUE), MC_VALUE)
    with socket.create_connection((address(server)[0], mc_port), 5) as sock:

        def exchange(request: bytes, wanted: bytes, ending: bytes = b"END\r\n") -> None:
            sock.sendall(request)
            sent = excerpt(request)
            got = read_until(sock, ending, request.count(b"\r\n"), sent=sent)
            expect(got == wanted, sent=sent, expected=excerpt(wanted), came=excerpt(got))

        exchange(b"get " + key + b"\r\n", hit)
        exchange(b"get nothing-here\r\n", b"END\r\n")
        three = b"get " + key + b"\r\nget nothing-here\r\nget " + key + b"\r\n"
        exchange(three, hit + b"END\r\n" + hit)
        exchange(b"set x 0 0 1\r\n", b"ERROR\r\n", b"\r\n")
        sock.sendall(b"quit\r\n")
        rest = sock.recv(100)
        expect(
            rest == b"",
            sent="quit",
            expected="the connection closed",
            came=f"{excerpt(rest)} before any close",
        )
    return f"get hit, miss, three in one write, ERROR, quit on port {mc_port}"

"""What is the baselines' own: nginx's wrapper and telemetry, EventMachine's HTTP parsing,
and the nginx load balancer (lb:N) in front of two real aiohttp instances.

The routes they serve (nginx `/` and `/files/`, EventMachine `/` and `/counter`) are
checked with every other server's by tests/e2e/test_conformance.py; SIGTERM, telemetry
fields and --workers by tests/e2e/test_processes.py. Loopback only, OS-chosen ports.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from harness.server_process import ServerProcess, start_server
from harness.services.balancer import LoadBalancer
from harness.services.fileset import FileSet
from harness.tls import make_certificates
from harness.verify import endpoint_for
from harness.verify.endpoint import open_connection
from harness.verify.wire import expect_still_serving
from servers import contract
from servers.baselines import nginx as nginx_config
from tests.helpers import (
    assert_still_serving,
    raw_exchange,
    require_framework,
    require_tool,
    status_code,
    stop_in_time,
)


def assert_text_reply(response: httpx.Response) -> None:
    """The contract's `GET /`: exact body, text/plain, Content-Length, Date and Server."""
    assert response.status_code == 200
    assert response.content == contract.TEXT_BODY
    assert response.headers["content-type"] == contract.TEXT_CONTENT_TYPE
    assert int(response.headers["content-length"]) == len(contract.TEXT_BODY)
    assert email.utils.parsedate_to_datetime(response.headers["date"]) is not None
    assert response.headers["server"]


def assert_telemetry_shape(line: dict, framework: str, loop: str, port: int) -> None:
    assert tuple(line) == contract.TELEMETRY_FIELDS
    assert line["framework"] == framework
    assert line["loop"] == loop
    assert line["port"] == port
    assert line["rss_bytes"] > 0


def read_replies(sock: socket.socket, count: int, timeout_s: float = 5.0) -> list[bytes]:
    """Read `count` whole HTTP replies (Content-Length framed) from a raw socket."""
    sock.settimeout(timeout_s)
    data = b""
    replies: list[bytes] = []
    while len(replies) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            head = data[:head_end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(data) >= end:
                replies.append(data[:end])
                data = data[end:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed after {len(replies)} of {count} replies")
        data += chunk
    return replies


def body_of(reply: bytes) -> bytes:
    return reply.split(b"\r\n\r\n", 1)[1]


def closed_by_peer(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# -- the nginx baseline ------------------------------------------------------------------
@pytest.fixture(scope="module")
def nginx_server(fileset: FileSet) -> Iterator[ServerProcess]:
    """nginx with --files-dir (its routes are checked by tests/e2e/test_conformance.py)."""
    require_framework("nginx")
    process = start_server("nginx", extra_args=["--files-dir", str(fileset.directory)])
    yield process
    status = process.stop()
    assert status == 0, f"nginx exited {status}: {process.stderr_tail()}"


def test_nginx_telemetry_counts_connections_and_requests(nginx_server: ServerProcess) -> None:
    latest = nginx_server.latest_telemetry()[nginx_server.pid]
    assert_telemetry_shape(latest, "nginx", "epoll", nginx_server.port)
    assert latest["pid"] == nginx_server.pid  # the wrapper, which the harness started
    before = latest["requests"]
    with httpx.Client(base_url=nginx_server.url, timeout=5) as client:
        for _ in range(20):
            client.get(contract.ROUTE_TEXT)
        busy = nginx_server.wait_telemetry(
            lambda r: r["requests"] >= before + 20 and r["open"] >= 1
        )
    assert busy is not None, nginx_server.telemetry_lines()[-3:]
    assert busy["max_open"] >= 1
    # Its own stub_status reads are not counted: an idle nginx stays where it was.
    idle = nginx_server.wait_telemetry(lambda r: r["t"] > busy["t"] + 1.5, timeout_s=4)
    assert idle is not None
    assert idle["requests"] == busy["requests"]
    assert idle["open"] == 0


def test_nginx_without_files_dir_and_two_workers() -> None:
    require_framework("nginx")
    with start_server("nginx", workers=2) as server:
        assert_text_reply(httpx.get(server.url + "/", timeout=5))
        assert httpx.get(server.url + "/files/img-00000.jpg", timeout=5).status_code == 404
        lines = server.latest_telemetry()
        assert sorted(line["worker"] for line in lines.values()) == [0, 1]
        nginx_pids = {p.pid for p in psutil.Process(server.pid).children(recursive=True)}
        assert set(lines) - {server.pid} <= nginx_pids  # worker 1's line: an nginx worker
        stop_in_time(server)


def test_nginx_sigterm_exits_0_and_leaves_nothing_behind() -> None:
    require_framework("nginx")
    server = start_server("nginx")
    nginx_processes = psutil.Process(server.pid).children(recursive=True)
    run_dirs = {
        Path(p.cmdline()[p.cmdline().index("-p") + 1])
        for p in nginx_processes
        if "-p" in p.cmdline()
    }
    assert nginx_processes and len(run_dirs) == 1
    stop_in_time(server)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in nginx_processes)
    assert not any(run_dir.exists() for run_dir in run_dirs)


def test_nginx_config_helpers() -> None:
    with pytest.raises(KeyError, match="missing"):
        nginx_config.render_template("a {{missing}} b", {})
    assert nginx_config.render_template("{{a}}-{{a}}", {"a": 1}) == "1-1"
    with pytest.raises(ValueError):
        nginx_config.quote("/tmp/$HOME")
    assert nginx_config.quote('a"b\\c') == '"a\\"b\\\\c"'
    for extension, mime in contract.FILE_CONTENT_TYPES.items():
        assert f"{mime} {extension.lstrip('.')}" in nginx_config.types_block()
    assert nginx_config.listen_address("::1", 80) == "[::1]:80"
    # One listener per protocol: ssl for TLS, http2 for HTTP/2 (over TLS or prior knowledge)
    listens = {p: nginx_config.listen_directive("::1", 80, p) for p in contract.PROTOCOLS}
    assert listens[contract.PROTOCOL_H1].startswith("listen [::1]:80 reuseport")
    assert listens[contract.PROTOCOL_H1_TLS].startswith("listen [::1]:80 ssl reuseport")
    assert listens[contract.PROTOCOL_H2].startswith("listen [::1]:80 ssl http2 reuseport")
    assert listens[contract.PROTOCOL_H2C].startswith("listen [::1]:80 http2 reuseport")
    with pytest.raises(ValueError, match="h3"):
        nginx_config.listen_directive("::1", 80, "h3")
    with pytest.raises(ValueError, match="certificate"):
        nginx_config.baseline_server_block("::1", 80, None, protocol=contract.PROTOCOL_H2)
    tls_block = nginx_config.baseline_server_block(
        "::1", 80, None, protocol=contract.PROTOCOL_H1_TLS, tls_cert="/c.pem", tls_key="/k.pem"
    )
    assert 'ssl_certificate "/c.pem";' in tls_block
    assert 'ssl_certificate_key "/k.pem";' in tls_block
    assert "ssl_protocols TLSv1.3;" in tls_block
    # Slow-client deadlines in whole milliseconds: the defaults, the tests' 1 s, never 0
    assert nginx_config.nginx_time(contract.HEAD_TIMEOUT_S) == "10000ms"
    assert nginx_config.nginx_time(1.0) == "1000ms"
    assert nginx_config.nginx_time(0.0001) == "1ms"
    baseline = nginx_config.baseline_server_block("127.0.0.1", 80, None, 1.0, 2.5)
    assert "client_header_timeout 1000ms;" in baseline
    assert "keepalive_timeout 1000ms;" in baseline
    assert "client_body_timeout 2500ms;" in baseline
    # The balancer's clients get the contract's head deadline; idle upstream connections
    # are dropped before an instance's head deadline would close them.
    balancer = nginx_config.proxy_blocks("127.0.0.1", 80, [81])
    assert f"client_header_timeout {nginx_config.nginx_time(contract.HEAD_TIMEOUT_S)};" in balancer
    assert nginx_config.UPSTREAM_KEEPALIVE_TIMEOUT_S < contract.HEAD_TIMEOUT_S


# -- the EventMachine baseline -----------------------------------------------------------
@pytest.fixture(scope="module")
def em_server() -> Iterator[ServerProcess]:
    require_framework("eventmachine")
    process = start_server("eventmachine")
    yield process
    status = process.stop()
    assert status == 0, f"eventmachine exited {status}: {process.stderr_tail()}"


def counter_of(server: ServerProcess) -> dict[str, int]:
    return httpx.get(server.url + contract.ROUTE_COUNTER, timeout=5).json()


def test_em_head_has_no_body(em_server: ServerProcess) -> None:
    head = httpx.head(em_server.url + contract.ROUTE_TEXT, timeout=5)
    assert head.status_code == 200 and head.content == b""


def test_em_counter_counts_open_connections_and_requests() -> None:
    require_framework("eventmachine")
    request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    with start_server("eventmachine") as server:
        sockets = [socket.create_connection(("127.0.0.1", server.port), 5) for _ in range(3)]
        try:
            for sock in sockets:
                sock.sendall(request)
                assert status_code(read_replies(sock, 1)[0]) == 200
            reply = httpx.get(server.url + contract.ROUTE_COUNTER, timeout=5)
            assert reply.headers["content-type"] == contract.JSON_CONTENT_TYPE
            assert reply.json() == {"open": 4, "max_open": 4, "requests": 4}
        finally:
            for sock in sockets:
                sock.close()
        deadline = time.monotonic() + 5
        while (counter := counter_of(server))["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert counter["open"] == 1 and counter["max_open"] == 4
        assert counter["requests"] >= 5


def test_em_keep_alive_and_pipelining(em_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", em_server.port), 5) as sock:
        for _ in range(3):  # kept alive: one request after another on one connection
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert body_of(read_replies(sock, 1)[0]) == contract.TEXT_BODY
        # Two requests in one send (and a POST body before them): answered in order.
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /counter HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        post, text, counter = read_replies(sock, 3)
        assert status_code(post) == 405 and b"Allow: GET, HEAD" in post
        assert status_code(text) == 200 and body_of(text) == contract.TEXT_BODY
        assert status_code(counter) == 200
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        (last,) = read_replies(sock, 1)
        assert b"Connection: close" in last
        assert closed_by_peer(sock)


LATE_READER_WAIT_S = 1.0  # long enough to fill the buffers: the server stops reading
LATE_READER_LIMIT_S = 120.0  # a bound on the whole exchange, not a timing assertion
SEND_STEP_BYTES = 16 * 1024


def pipeline_and_read_late(sock: socket.socket, count: int) -> int:
    """Pipeline `count` `GET /` on `sock` (TCP, or TLS: one thread, since an SSL object is
    not to be read and written at once), reading nothing for LATE_READER_WAIT_S, then
    sending the rest and reading the answers. Returns how many answers came."""
    requests = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * count
    status_line = b"HTTP/1.1 200 OK\r\n"
    sock.settimeout(0.05)
    start_s = time.monotonic()
    sent, answered, tail = 0, 0, b""
    while answered < count and time.monotonic() - start_s < LATE_READER_LIMIT_S:
        if sent < len(requests):
            with contextlib.suppress(TimeoutError, ssl.SSLWantWriteError):
                sent += sock.send(requests[sent : sent + SEND_STEP_BYTES])
        if time.monotonic() - start_s < LATE_READER_WAIT_S:
            continue
        try:
            chunk = sock.recv(1 << 20)
        except (TimeoutError, ssl.SSLWantReadError):
            continue
        assert chunk, f"closed after {answered} of {count} answers"
        data = tail + chunk
        answered += data.count(status_line)
        tail = data[-(len(status_line) - 1) :]
    return answered


def test_em_pipelining_client_that_reads_late_gets_every_answer(em_server: ServerProcess) -> None:
    """A client that pipelines more answers than the sockets' buffers hold before reading
    any: the server stops reading it (tests/e2e/test_h2_attacks.py checks that), reads on
    once the client reads, and answers every request, in order."""
    count = 200_000  # ~30 MB of answers, over the buffers of both ends of a loopback socket
    with socket.create_connection(("127.0.0.1", em_server.port), 5) as sock:
        assert pipeline_and_read_late(sock, count) == count
    assert_still_serving(em_server)


def test_em_pipelining_client_that_reads_late_over_tls_gets_every_answer(
    tmp_path: Path,
) -> None:
    """The same over TLS, where the server's bound follows its own queue of records."""
    require_framework("eventmachine")
    certificates = make_certificates(tmp_path)
    count = 100_000  # ~15 MB of answers
    with start_server(
        "eventmachine", protocol=contract.PROTOCOL_H1_TLS, certificates=certificates
    ) as server:
        endpoint = endpoint_for(server.url, contract.PROTOCOL_H1_TLS, certificates)
        with open_connection(endpoint) as sock:
            assert pipeline_and_read_late(sock, count) == count
        expect_still_serving(endpoint, "a late reader's pipelined requests")


def test_em_http10_closes_unless_kept_alive(em_server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", em_server.port), 5) as sock:
        sock.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        assert b"Connection: keep-alive" in read_replies(sock, 1)[0]
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert status_code(read_replies(sock, 1)[0]) == 200
        assert closed_by_peer(sock)


def test_em_oversized_head_is_refused(em_server: ServerProcess) -> None:
    reply = raw_exchange(em_server.port, b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 20_000)
    assert status_code(reply) == 431, reply[:200]
    assert_still_serving(em_server)


def test_em_oversized_body_is_refused(em_server: ServerProcess) -> None:
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n"
    assert status_code(raw_exchange(em_server.port, request)) == 413
    assert_still_serving(em_server)


def test_em_telemetry(em_server: ServerProcess) -> None:
    latest = em_server.latest_telemetry()[em_server.pid]
    assert_telemetry_shape(latest, "eventmachine", "eventmachine", em_server.port)
    assert latest["gc_collections"] > 0
    before = latest["requests"]
    with httpx.Client(base_url=em_server.url, timeout=5) as client:
        for _ in range(20):
            client.get(contract.ROUTE_TEXT)
        busy = em_server.wait_telemetry(lambda r: r["requests"] >= before + 20 and r["open"] >= 1)
    assert busy is not None, em_server.telemetry_lines()[-3:]
    assert 0 <= busy["tick_avg_ms"] <= busy["tick_max_ms"] < 1000


# -- the load balancer -------------------------------------------------------------------
@pytest.fixture(scope="module")
def instances() -> Iterator[list[ServerProcess]]:
    """Two real aiohttp servers to balance over."""
    require_tool("nginx")
    require_framework("aiohttp")
    started: list[ServerProcess] = []
    try:
        for _ in range(2):
            started.append(start_server("aiohttp"))
        yield started
    finally:
        for server in started:
            server.stop()


def served(server: ServerProcess) -> int:
    """Requests an instance served, not counting this question."""
    return counter_of(server)["requests"] - 1


def test_load_balancer_spreads_over_the_instances(instances: list[ServerProcess]) -> None:
    cpu = str(min(os.sched_getaffinity(0)))
    before = [served(server) for server in instances]
    with LoadBalancer([s.port for s in instances], cpus=cpu) as balancer:
        assert psutil.Process(balancer.pid).cpu_affinity() == [int(cpu)]
        for _ in range(20):  # a new client connection each time
            assert_text_reply(httpx.get(balancer.url + "/", timeout=5))
        gained = [served(server) - b - 1 for server, b in zip(instances, before, strict=True)]
        pids = balancer.pids()
    assert sum(gained) >= 20
    assert min(gained) >= 8, gained  # round robin: about half each
    assert pids and not any(psutil.pid_exists(pid) for pid in pids)


def test_load_balancer_keeps_one_client_alive_for_200_requests(
    instances: list[ServerProcess],
) -> None:
    with (
        LoadBalancer([s.port for s in instances], cpus=None, workers=2) as balancer,
        httpx.Client(base_url=balancer.url, timeout=5) as client,
    ):
        bodies = [client.get("/") for _ in range(200)]
        assert all(r.status_code == 200 and r.content == contract.TEXT_BODY for r in bodies)
        counters = [counter_of(server) for server in instances]
    # Kept-alive upstream connections: a handful per instance, not one per request.
    assert all(c["open"] <= 4 for c in counters), counters


def test_load_balancer_stops_cleanly_and_refuses_nonsense() -> None:
    require_tool("nginx")
    with pytest.raises(ValueError):
        LoadBalancer([], cpus=None)
    with socket.socket() as sock:  # an upstream that is not there: nginx answers 502
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    balancer = LoadBalancer([dead_port], cpus=None).start()
    master = psutil.Process(balancer.pid)
    group = os.getpgid(balancer.pid)
    assert httpx.get(balancer.url + "/", timeout=5).status_code == 502
    assert balancer.stop() == 0
    assert not master.is_running()
    with pytest.raises(ProcessLookupError):
        os.killpg(group, 0)  # no process is left in nginx's group

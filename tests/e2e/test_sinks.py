"""File and MongoDB sinks on every framework that offers them, against real FerretDB."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from harness.server_process import start_server
from harness.services.sink_store import SinkStore
from servers import FRAMEWORKS, contract
from tests.helpers import SHARED_RUNTIME, one_per_runtime, require_ferretdb, require_framework

MONGO_SINK_SERVERS = [name for name, f in FRAMEWORKS.items() if "mongo" in f.sinks]

PAIRS = [(name, sink) for name, f in FRAMEWORKS.items() for sink in f.sinks if sink != "empty"]


@pytest.fixture(
    params=[
        # a runtime's sink code once in the default run (SHARED_RUNTIME: its twin is slow)
        pytest.param(pair, marks=pytest.mark.slow, id=f"{pair[0]}-{pair[1]}")
        if (SHARED_RUNTIME.get(pair[0]), pair[1]) in PAIRS
        else pytest.param(pair, id=f"{pair[0]}-{pair[1]}")
        for pair in PAIRS
    ]
)
def sink_server(request: pytest.FixtureRequest) -> Iterator[tuple[object, SinkStore]]:
    framework, sink = request.param
    require_framework(framework)
    if sink == "mongo":
        require_ferretdb()
    with SinkStore(sink) as store:
        server = start_server(framework, sink=sink, extra_args=store.server_args())
        try:
            yield server, store
        finally:
            server.stop()


def test_every_log_request_is_stored_before_its_reply(sink_server) -> None:
    server, store = sink_server
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for i in range(50):
            body = json.dumps({"i": i})
            reply = client.post(
                contract.ROUTE_LOG,
                content=body,
                headers={"Content-Type": "application/json", "X-Test": str(i)},
            )
            assert reply.status_code == 200 and reply.content == contract.LOG_REPLY_BODY
    # file: handed to the OS before the reply; mongo: acknowledged (w: 1)
    assert store.count() == 50
    first = store.records(1)[0]
    assert set(contract.RECORD_FIELDS) <= set(first)
    assert first["method"] == "POST" and first["path"] == contract.ROUTE_LOG
    assert json.loads(first["body"]) == {"i": 0}
    assert {k.lower(): v for k, v in first["headers"].items()}["x-test"] == "0"
    assert server.wait_telemetry(lambda t: t["stored"] >= 50 and t["backlog"] == 0)


def test_websocket_messages_reach_the_sink_and_shutdown_flushes(sink_server) -> None:
    server, store = sink_server
    url = f"ws://127.0.0.1:{server.port}{contract.ROUTE_WEBSOCKET}"
    with connect(url, origin="agent", subprotocols=["myprotocol"], proxy=None) as ws:  # type: ignore[arg-type]
        for i in range(30):
            ws.send(json.dumps({"a": "b", "i": i}))
        ws.ping().wait(5)
    assert server.stop() == 0
    assert store.count() == 30
    assert json.loads(store.records(1)[0]["body"]) == {"a": "b", "i": 0}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SINK_SERVERS))
def test_database_down_answers_503_and_keeps_serving(framework: str) -> None:
    require_framework(framework)
    args = ["--mongo-url", f"mongodb://127.0.0.1:{closed_port()}/"]
    with start_server(framework, sink="mongo", extra_args=args) as server:
        reply = httpx.post(server.url + contract.ROUTE_LOG, content=b"{}", timeout=10)
        assert reply.status_code == 503
        assert httpx.get(server.url + contract.ROUTE_TEXT, timeout=5).status_code == 200
        assert server.wait_telemetry(lambda t: t["sink_errors"] >= 1)


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SINK_SERVERS))
def test_database_that_goes_away_answers_503(framework: str) -> None:
    require_framework(framework)
    require_ferretdb()
    with SinkStore("mongo") as store:
        server = start_server(framework, sink="mongo", extra_args=store.server_args())
        try:
            assert (
                httpx.post(server.url + contract.ROUTE_LOG, content=b"{}", timeout=10).status_code
                == 200
            )
            assert store.database is not None and store.database.ferretdb is not None
            os.killpg(store.database.ferretdb.process.pid, signal.SIGKILL)
            store.database.ferretdb.process.wait()
            reply = httpx.post(server.url + contract.ROUTE_LOG, content=b"{}", timeout=15)
            assert reply.status_code == 503
            assert httpx.get(server.url + contract.ROUTE_TEXT, timeout=5).status_code == 200
        finally:
            assert server.stop() == 0


FILE_SINK_SERVERS = [name for name, f in FRAMEWORKS.items() if "file" in f.sinks]


@pytest.mark.parametrize("framework", one_per_runtime(FILE_SINK_SERVERS))
def test_a_failed_write_leaves_only_whole_records(framework: str) -> None:
    """A full disk, stood in for by RLIMIT_FSIZE on the server (SIGXFSZ ignored): the
    record that does not fit is refused (503) and leaves nothing; the next ones are whole."""
    require_framework(framework)
    limit_bytes = 4096
    with SinkStore("file") as store:
        server = start_server(framework, sink="file", extra_args=store.server_args())
        try:
            resource.prlimit(server.process.pid, resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
            with httpx.Client(base_url=server.url, timeout=10) as client:
                too_big = client.post(contract.ROUTE_LOG, content=b"A" * 2 * limit_bytes)
                replies = [client.post(contract.ROUTE_LOG, content=body) for body in (b"B", b"C")]
            assert too_big.status_code == contract.UNAVAILABLE_STATUS
            assert [reply.status_code for reply in replies] == [200, 200]
        finally:
            assert server.stop() == 0, server.stderr_tail()
        audit = store.audit()
        assert audit is not None and audit.unparseable == 0, store.path.read_bytes()[:200]
        assert [record["body"] for record in store.records()] == ["B", "C"]
        assert server.telemetry_lines()[-1]["sink_errors"] == 1


@pytest.mark.parametrize("framework", one_per_runtime(FILE_SINK_SERVERS))
def test_workers_store_records_with_distinct_ids(framework: str) -> None:
    require_framework(framework)
    requests = 40
    with SinkStore("file") as store:
        server = start_server(framework, sink="file", workers=2, extra_args=store.server_args())
        try:
            for i in range(requests):  # a connection each: SO_REUSEPORT spreads them
                reply = httpx.post(
                    server.url + contract.ROUTE_LOG, content=str(i), headers={"Connection": "close"}
                )
                assert reply.status_code == 200
        finally:
            assert server.stop() == 0, server.stderr_tail()
        audit = store.audit()
        assert audit is not None
        assert (audit.records, len(audit.ids), audit.duplicates) == (requests, requests, 0)
        assert {record_id.split("-")[0] for record_id in audit.ids} == {"0", "1"}


@pytest.mark.parametrize("framework", one_per_runtime(FILE_SINK_SERVERS))
def test_durable_file_sink_fsyncs_and_stores(framework: str) -> None:
    require_framework(framework)
    with (
        SinkStore("file", durable=True) as store,
        start_server(framework, sink="file", extra_args=store.server_args()) as server,
    ):
        for i in range(5):
            reply = httpx.post(server.url + contract.ROUTE_LOG, content=str(i))
            assert reply.status_code == 200
        assert store.count() == 5


@pytest.mark.parametrize("framework", one_per_runtime(MONGO_SINK_SERVERS))
def test_a_full_sink_queue_closes_the_websocket_with_1013(framework: str) -> None:
    """The database stopped: messages wait for inserts that take the selection timeout to
    fail. One more than contract.WS_SINK_MAX_PENDING closes the connection with 1013."""
    require_framework(framework)
    args = ["--mongo-url", f"mongodb://127.0.0.1:{closed_port()}/"]
    with start_server(framework, sink="mongo", extra_args=args) as server:
        url = f"ws://127.0.0.1:{server.port}{contract.ROUTE_WEBSOCKET}"
        with connect(url, origin="agent", subprotocols=["myprotocol"], proxy=None) as ws:  # type: ignore[arg-type]
            with contextlib.suppress(ConnectionClosed):
                for i in range(contract.WS_SINK_MAX_PENDING + 100):
                    ws.send(json.dumps({"i": i}))
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
        assert ws.close_code == contract.WS_CLOSE_TRY_AGAIN_LATER
        assert server.wait_telemetry(lambda t: t["sink_errors"] >= 1 and t["bad"] == 0)
        assert httpx.get(server.url + contract.ROUTE_TEXT, timeout=5).status_code == 200

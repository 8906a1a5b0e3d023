"""The sink check: a `/log` record reaches the sink the server was started with."""

from __future__ import annotations

import time

from harness.services.sink_store import SinkStore
from harness.verify.endpoint import EndpointOrUrl, http_client
from harness.verify.failure import expect, expect_status
from servers import contract

SINK_RECORD_WAIT_S = 2.0  # the file sink flushes within this; mongo acknowledges at once


def check_sink_record(server: EndpointOrUrl, store: SinkStore) -> str:
    """A /log record reaches the sink (file: within a flush; mongo: acknowledged)."""
    before = store.count() or 0
    marker = f"verify-{time.time_ns()}"
    with http_client(server) as client:
        response = client.post(contract.ROUTE_LOG, content=marker.encode())
    sent = f"POST {contract.ROUTE_LOG} with the body {marker!r}"
    expect_status(response.status_code, sent=sent)
    deadline = time.monotonic() + SINK_RECORD_WAIT_S
    while (store.count() or 0) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    after = store.count() or 0
    expect(
        after > before,
        sent=sent,
        expected=f"a record in the {store.sink} sink within {SINK_RECORD_WAIT_S:g} s "
        f"(it held {before})",
        came=f"none: it still holds {after}",
    )
    return f"{after - before} record stored ({store.sink})"

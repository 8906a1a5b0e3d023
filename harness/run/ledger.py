"""Nothing lost: what the sink held before the counted load, reconciled after it.

The case kinds count the sink once the warm-up is over (`count_before_load`); after the
server stopped (and flushed) `reconcile` compares what was acknowledged with what the
sink holds, and fails the case when an acknowledged record is missing.
"""

from __future__ import annotations

import dataclasses
import time

from harness.sink_store import SinkStore
from model.results import Case
from model.scenarios import Scenario

FLUSH_WAIT_S = 0.3  # the file sink writes at least every 100 ms


def count_before_load(store: SinkStore) -> int | None:
    """The sink's records before the counted load (None for the empty sink)."""
    if store.sink == "empty":
        return None
    time.sleep(FLUSH_WAIT_S)
    return store.count()


def reconcile(
    case: Case,
    scenario: Scenario,
    store: SinkStore,
    *,
    stored_before: int | None,
    messages_sent: int | None = None,
) -> Case:
    """Sent vs stored; the difference is lost. `messages_sent` counts WebSocket messages
    (HTTP scenarios count the replies of the case's steps)."""
    if stored_before is None or case.status != "ok" or not scenario.stores_records:
        return case
    stored = (store.count() or 0) - stored_before
    replies = sum(step.replies for step in case.steps)
    sent = (messages_sent or 0) if scenario.websocket else replies
    outcome = {"sent": sent, "stored": stored, "lost": max(0, sent - stored)}
    if stored > sent:  # stored, but the client saw no reply (it timed out first)
        outcome["stored_unacknowledged"] = stored - sent
    summary = dataclasses.replace(case.summary, sink_store=store.describe())
    case = dataclasses.replace(case, reconcile=outcome, summary=summary)
    acknowledged = store.sink == "file" or store.mongo_w == 1
    if outcome["lost"] and acknowledged:  # w: 0 may lose writes by design; 1 may not
        return dataclasses.replace(
            case,
            status="failed",
            error=f"lost {outcome['lost']} of {sent} acknowledged records in the {store.sink} sink",
        )
    return case

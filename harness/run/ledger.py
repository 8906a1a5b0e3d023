"""Nothing lost: what the sink held before the counted load, reconciled after it.

The case kinds mark the sink once the warm-up is over (`count_before_load`); after the
server stopped (and flushed) `reconcile` audits the sink record by record — each one
parsed, its `id` read — and compares the distinct new ids with what was acknowledged.

The load generators do not know the ids, so "acknowledged" is a count: the 2xx replies
of `/log` (an HTTP case's steps) or the WebSocket messages sent. The case fails when
fewer distinct new records than acknowledged ones are stored (`lost`), when a record id
is stored twice (`duplicates`), or when a record does not parse (`unparseable`, a torn
write); on such a failure the sink's contents are kept beside the case's results.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.services.sink_store import SinkAudit, SinkStore
from model.results import Case, Step
from model.scenarios import Scenario

FLUSH_WAIT_S = 0.3  # the file sink writes at least every 100 ms
KEPT_RECORDS_FILE = "sink-records.jsonl"  # the sink's contents, kept after a loss


def count_before_load(store: SinkStore) -> int | None:
    """Mark what the sink holds before the counted load; its record count (None for the
    empty sink)."""
    if store.sink == "empty":
        return None
    time.sleep(FLUSH_WAIT_S)
    return store.mark_baseline()


@dataclass(frozen=True)
class SinkLedger:
    """What the sink's audit after the load found: the counts (a Case's `reconcile`), what
    stored the records (its summary's `sink_store`) and, when records were lost, stored
    twice or torn, the case's error (None: nothing lost)."""

    outcome: dict[str, int]
    sink_store: dict[str, Any]
    error: str | None = None


def audit_sink(
    steps: Sequence[Step],
    scenario: Scenario,
    store: SinkStore,
    *,
    stored_before: int | None,
    messages_sent: int | None = None,
    keep_dir: Path | None = None,
) -> SinkLedger | None:
    """Acknowledged vs the distinct ids stored since the mark; the difference is lost.
    `messages_sent` counts WebSocket messages (HTTP scenarios count the replies of
    `steps`). With `keep_dir`, a failed audit keeps the sink's contents there
    (`KEPT_RECORDS_FILE`). None when nothing is reconciled (no mark, or a scenario that
    stores no records)."""
    if stored_before is None or not scenario.stores_records:
        return None
    after = store.audit() or SinkAudit.of(())
    before = store.baseline or SinkAudit.of(())
    stored = len(after.ids - before.ids)
    replies = sum(step.replies for step in steps)
    sent = (messages_sent or 0) if scenario.websocket else replies
    outcome = {
        "sent": sent,
        "stored": stored,
        "lost": max(0, sent - stored),
        "duplicates": after.duplicates - before.duplicates,
        "unparseable": after.unparseable - before.unparseable,
    }
    if stored > sent:  # stored, but the client saw no reply (it timed out first)
        outcome["stored_unacknowledged"] = stored - sent
    sink_store = store.describe()
    acknowledged = store.sink == "file" or store.mongo_w == 1
    problems = []
    if outcome["lost"] and acknowledged:  # w: 0 may lose writes by design; 1 may not
        problems.append(f"lost {outcome['lost']} of {sent} acknowledged records")
    if outcome["duplicates"]:
        problems.append(f"{outcome['duplicates']} records stored twice")
    if outcome["unparseable"]:
        problems.append(f"{outcome['unparseable']} records unparseable")
    if not problems:
        return SinkLedger(outcome, sink_store)
    error = f"{', '.join(problems)} in the {store.sink} sink"
    if keep_dir is not None:
        kept = store.keep(keep_dir / KEPT_RECORDS_FILE)
        if kept is not None:
            error += f" (its records kept in {kept.name})"
    return SinkLedger(outcome, sink_store, error)


def reconcile(
    case: Case,
    scenario: Scenario,
    store: SinkStore,
    *,
    stored_before: int | None,
    messages_sent: int | None = None,
    keep_dir: Path | None = None,
) -> Case:
    """An ok case with its sink's audit (`audit_sink`): the counts in its `reconcile`, the
    sink in its summary's `sink_store`, and failed when records were lost, stored twice
    or torn. A case that is not ok is returned as it is."""
    if case.status != "ok":
        return case
    ledger = audit_sink(
        case.steps,
        scenario,
        store,
        stored_before=stored_before,
        messages_sent=messages_sent,
        keep_dir=keep_dir,
    )
    if ledger is None:
        return case
    summary = dataclasses.replace(case.summary, sink_store=ledger.sink_store)
    case = dataclasses.replace(case, reconcile=ledger.outcome, summary=summary)
    if ledger.error is None:
        return case
    return dataclasses.replace(case, status="failed", error=ledger.error)

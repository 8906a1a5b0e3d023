"""Sink records without a server: whole lines after a failed write, unique ids, and the
ledger reconciling by id."""

from __future__ import annotations

import json
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.run.ledger import KEPT_RECORDS_FILE, count_before_load, reconcile
from harness.services.sink_store import SinkStore
from model.results import Case, Step
from model.scenarios import SCENARIOS
from servers.contract import RECORD_FIELDS, ServerOptions
from servers.core.sinks import FileBatch
from servers.core.state import ServerState


def record(state: ServerState, body: str) -> dict[str, object]:
    return state.make_record("POST", "/log", {}, body)


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """A full disk, stood in for by RLIMIT_FSIZE (Python ignores SIGXFSZ: write gets EFBIG)."""
    assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    yield
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.usefixtures("file_size_limit")
def test_a_write_failing_part_way_leaves_only_whole_records(tmp_path: Path) -> None:
    state = ServerState("test", "none")
    path = tmp_path / "records.jsonl"
    batch = FileBatch(str(path))
    limit = 4096
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        batch.add(record(state, "A" * 2 * limit))  # crosses the limit: 503
        data, _ = batch.take()
        with pytest.raises(OSError):
            batch.write(data)
        for body in ("B", "C"):  # fit under the limit: 200
            batch.add(record(state, body))
            batch.write(batch.take()[0])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
        batch.close()
    lines = path.read_bytes().splitlines()
    assert [json.loads(line)["body"] for line in lines] == ["B", "C"]


def test_durable_batches_are_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    for durable in (False, True):
        batch = FileBatch(str(tmp_path / f"{durable}.jsonl"), durable=durable)
        batch.add(record(ServerState("test", "none"), "x"))
        batch.write(batch.take()[0])
        batch.close()
    assert len(synced) == 1


def test_durable_mongo_needs_an_acknowledged_write() -> None:
    with pytest.raises(ValueError, match="durable"):
        ServerOptions("aiohttp", sink="mongo", mongo_w=0, durable=True)
    assert ServerOptions("aiohttp", sink="mongo", durable=True).durable


def test_record_ids_are_unique_across_workers() -> None:
    workers = [ServerState("test", "none", worker) for worker in (0, 1)]
    records = [record(state, "x") for state in workers for _ in range(3)]
    assert [r["seq"] for r in records] == [1, 2, 3, 1, 2, 3]  # seq is per process
    assert len({r["id"] for r in records}) == 6
    assert tuple(records[0]) == RECORD_FIELDS


def log_case(replies: int) -> Case:
    step = Step(
        offered=replies,
        unit="concurrency",
        achieved=replies,
        replies=replies,
        errors={"total": 0},
        error_rate=0.0,
        latency_ms={
            "avg": 1.0,
            "p50": 1.0,
            "p90": 2.0,
            "p99": 1.0,
            "p99.9": None,
            "p99.99": None,
            "max": 5.0,
        },
    )
    return Case("aiohttp", "log", "file", "wrk", "single", {"mode": "both"}, "ok", steps=(step,))


def reconciled(lines: list[bytes], acknowledged: int, keep_dir: Path | None = None) -> Case:
    with SinkStore("file") as store:
        store.path.write_bytes(b'{"id":"warm-up"}\n')
        stored_before = count_before_load(store)
        with store.path.open("ab") as sink:
            sink.writelines(lines)
        return reconcile(
            log_case(acknowledged),
            SCENARIOS["log"],
            store,
            stored_before=stored_before,
            keep_dir=keep_dir,
        )


def lines_of(ids: list[str]) -> list[bytes]:
    return [json.dumps({"id": i, "body": "x"}).encode() + b"\n" for i in ids]


def test_records_missing_from_the_sink_fail_the_case(tmp_path: Path) -> None:
    case = reconciled(lines_of([f"0-1-{i}" for i in range(7)]), 10, keep_dir=tmp_path)
    assert case.reconcile == {"sent": 10, "stored": 7, "lost": 3, "duplicates": 0, "unparseable": 0}
    assert case.status == "failed"
    assert case.error == (
        "lost 3 of 10 acknowledged records in the file sink"
        f" (its records kept in {KEPT_RECORDS_FILE})"
    )
    assert len((tmp_path / KEPT_RECORDS_FILE).read_bytes().splitlines()) == 8  # warm-up too


def test_duplicate_ids_do_not_hide_a_loss() -> None:
    # seq per process: two workers' records 1..5 collide when only seq numbers them
    case = reconciled(lines_of([f"0-1-{i}" for i in range(8)] + ["0-1-0", "0-1-1"]), 10)
    outcome = case.reconcile or {}
    assert (outcome["stored"], outcome["lost"], outcome["duplicates"]) == (8, 2, 2)
    assert case.status == "failed"


def test_a_torn_record_is_found_by_parsing() -> None:
    # a failed write's half line with the next record glued to it: as many lines as replies
    torn = b'{"id":"0-1-0","body":"AAAA' + lines_of(["0-1-1"])[0]
    case = reconciled([torn, *lines_of(["0-1-2"])], 2)
    assert case.reconcile is not None
    assert (case.reconcile["stored"], case.reconcile["unparseable"]) == (1, 1)
    assert case.status == "failed"
    assert "1 records unparseable" in (case.error or "")


def test_every_acknowledged_record_stored_passes() -> None:
    case = reconciled(lines_of([f"1-2-{i}" for i in range(5)]), 5)
    assert case.status == "ok"
    assert case.reconcile == {"sent": 5, "stored": 5, "lost": 0, "duplicates": 0, "unparseable": 0}


def test_durable_is_a_profile_setting_the_server_is_given() -> None:
    from harness.profile import load_profile
    from model.errors import UserError

    assert load_profile("smoke", {"sink": "file", "durable": "true"}).durable is True
    assert load_profile("smoke", {"sink": "file"}).durable is False
    with pytest.raises(UserError, match="durable"):
        load_profile("smoke", {"sink": "mongo", "mongo_w": 0, "durable": True})
    with SinkStore("file", durable=True) as store:
        assert store.server_args()[-1] == "--durable"
        assert store.describe()["durable"] is True


def test_a_request_body_is_stored_as_utf8_text_with_bytes_that_are_not_replaced() -> None:
    state = ServerState("test", "none")
    stored = state.request_record("POST", "/log", {"X": "\xff"}, b"caf\xc3\xa9 \xff!")
    assert stored["body"] == "café \ufffd!"
    assert (stored["method"], stored["path"], stored["headers"]) == ("POST", "/log", {"X": "\xff"})

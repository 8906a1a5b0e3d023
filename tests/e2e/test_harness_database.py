"""FerretDB on a throwaway PostgreSQL cluster, with real
processes: it starts with the harness's settings, serves the mongo sink and GridFS
(reads planned on the GIN indexes, as PostgreSQL's own catalog and planner say), and
leaves no process and no directory behind, judged by the process table.

Each test gives the harness a TMPDIR of its own under /tmp that the postgres user may
enter (pytest's tmp_path is root's alone): every temporary directory lands there, and
every process the harness starts carries it in its environment or command line.
"""

from __future__ import annotations

import contextlib
import csv
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from pymongo import MongoClient

from harness.affinity import cpus_allowed
from harness.cgroups.groups import detect_support
from harness.compare import build_plan
from harness.run import Runner
from harness.run.outputs import ramp_dir
from harness.run_options import RunOptions
from harness.services.backends import GRIDFS_QUERY_FIELDS, Backends
from harness.services.database import HarnessDatabase
from harness.services.fileset import FileSet
from tests.helpers import require_ferretdb, require_framework, require_tools


def processes_under(marker: Path) -> list[str]:
    """Every live process with `marker` in its environment's TMPDIR or its command line."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            line = " ".join(process.cmdline())
            if process.environ().get("TMPDIR") == str(marker) or str(marker) in line:
                found.append(f"{process.pid} {process.username()} {line}")
    return found


@pytest.fixture
def reachable_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A TMPDIR the postgres user can enter, for this process and its children."""
    require_ferretdb()
    require_tools("postgres")
    tmp_path_factory.getbasetemp()  # pytest's own stays where it is, not under this TMPDIR
    directory = Path(tempfile.mkdtemp(prefix="harness-test-", dir="/tmp"))
    directory.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield directory
    for line in processes_under(directory):  # never leave a failed test's processes
        with contextlib.suppress(psutil.Error):
            psutil.Process(int(line.split()[0])).kill()
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("durable", [False, True], ids=["w1", "durable"])
def test_ferretdb_on_postgresql_serves_with_its_settings_and_leaves_nothing(
    reachable_tmp: Path, durable: bool
) -> None:
    with HarnessDatabase("postgresql", durable=durable) as db:
        assert db.postgresql is not None
        running = processes_under(reachable_tmp)
        assert any("--handler=postgresql" in line for line in running), running
        postmaster = [line for line in running if "/postgres -D" in line]
        assert len(postmaster) == 1, running
        if os.geteuid() == 0:  # PostgreSQL refuses root: it runs as postgres
            assert postmaster[0].split()[1] == "postgres"
        sql = db.postgresql.sql
        assert sql("SHOW synchronous_commit") == ("on" if durable else "off")
        assert sql("SHOW plan_cache_mode") == "force_custom_plan"
        assert sql("SHOW listen_addresses") == ""  # the private socket only: no TCP port
        client: MongoClient = MongoClient(db.url, serverSelectionTimeoutMS=5000)
        try:
            client.probe.records.insert_one({"_id": "a", "id": "a"})
            assert client.probe.records.find_one({"_id": "a"}) == {"_id": "a", "id": "a"}
        finally:
            client.close()
        assert len(db.pids()) == 2
        assert db.describe()["postgresql"]["settings"]["synchronous_commit"] == (
            "on" if durable else "off"
        )
    assert processes_under(reachable_tmp) == []
    assert os.listdir(reachable_tmp) == []


def test_gridfs_through_postgresql_is_read_on_gin_indexes(
    reachable_tmp: Path, fileset: FileSet
) -> None:
    import gridfs

    name = "harness_gin_test"
    with (
        HarnessDatabase("postgresql") as db,
        Backends(
            ["gridfs"],
            database=db,
            mongo_db=name,
            file_count=len(fileset.files),
            seed=fileset.seed,
            files_dir=fileset.directory,
        ) as backends,
    ):
        assert db.postgresql is not None
        assert backends.loaded_files == len(fileset.files)
        assert backends.gridfs_read_ms is not None
        indexes = db.postgresql.sql(
            f"SELECT tablename || ' ' || indexdef FROM pg_indexes WHERE schemaname = '{name}' "
            "AND indexdef LIKE '%USING gin%'"
        ).splitlines()
        for collection, fields in GRIDFS_QUERY_FIELDS.items():
            table = db.table_of(name, collection)
            assert table is not None
            for field in fields:
                assert any(
                    line.startswith(table + " ") and f"(_jsonb -> '{field}'::text)" in line
                    for line in indexes
                ), (collection, field, indexes)
                # FerretDB's own query shape, as a prepared statement: with the table
                # scan priced out, only an index that serves it can take it
                plan = db.postgresql.sql(
                    "SET enable_seqscan = off; "
                    f'PREPARE lookup(text, jsonb) AS SELECT _jsonb FROM "{name}"."{table}" '
                    "WHERE _jsonb->$1 @> $2; "
                    f"""EXPLAIN EXECUTE lookup('{field}', '"x"')"""
                )
                assert f"{table}_{field}_gin" in plan, plan
        # a stock GridFS reader (fs.files by filename, fs.chunks by files_id sorted by n)
        client: MongoClient = MongoClient(backends.mongo_url, serverSelectionTimeoutMS=5000)
        try:
            bucket = gridfs.GridFSBucket(client[name])
            for file_name in (fileset.names[0], fileset.names[-1]):
                stored = bucket.open_download_stream_by_name(file_name).read()
                assert stored == (fileset.directory / file_name).read_bytes()
        finally:
            client.close()
        described = backends.describe()["gridfs"]["server"]
        assert described["backend"] == "postgresql"
        assert len(described["postgresql"]["gin_indexes"]) == 4
    assert processes_under(reachable_tmp) == []
    assert os.listdir(reachable_tmp) == []


def test_the_mongo_sink_on_postgresql_loses_nothing_and_records_the_databases_cpu(
    reachable_tmp: Path, tmp_path: Path
) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    plan = build_plan(
        RunOptions(
            frameworks="aiohttp",
            profile="smoke",
            settings={"scenario": "log", "sink": "mongo", "ramp.stop": 10, "warmup_s": 0},
            results_dir=tmp_path / "results",
            mongo_backend="postgresql",
            verify=False,  # what the database stored of the load is checked
        )
    )
    run = Runner(plan).run()
    [case] = run.cases
    assert case.status == "ok", case.error
    assert case.reconcile is not None
    assert case.reconcile["lost"] == 0, case.reconcile
    assert case.reconcile["sent"] == sum(s.replies for s in case.steps) > 100
    assert run.config["mongo_backend"] == "postgresql"
    stored_in = case.summary.sink_store["database"]
    assert stored_in["backend"] == "postgresql"
    assert stored_in["postgresql"]["settings"]["plan_cache_mode"] == "force_custom_plan"
    # FerretDB and PostgreSQL worked for every record: their CPU shows in every step, read
    # from their own cgroup where the run may make one (removed with the run)
    assert all(step.figures.db_cpu_pct > 0 for step in case.steps), case.steps
    group = run.config["database_cgroup"]
    if detect_support().usable:
        assert group is not None and group.endswith("-database"), run.config
        assert not any((parent / group).exists() for parent in detect_support().parents.values())
    else:
        assert group is None
    with (ramp_dir(plan.out_dir, case) / "monitor.csv").open() as monitor:
        rows = list(csv.DictReader(monitor))
    assert rows and all(row["db_cpu_pct"] != "" for row in rows)
    assert processes_under(reachable_tmp) == []
    assert os.listdir(reachable_tmp) == []


def test_db_cpus_pin_ferretdb_postgresql_and_its_backends(reachable_tmp: Path) -> None:
    cpu = str(max(os.sched_getaffinity(0)))
    with HarnessDatabase("postgresql", cpus=cpu) as db:
        client: MongoClient = MongoClient(db.url, serverSelectionTimeoutMS=5000)
        try:
            client.probe.records.insert_one({"id": "a"})  # FerretDB opens its connections
        finally:
            client.close()
        watched = [psutil.Process(pid) for pid in db.pids()]
        tree = watched + [child for p in watched for child in p.children(recursive=True)]
        assert len(tree) > 2  # PostgreSQL's backends, FerretDB's connections among them
        assert {cpus_allowed(p.pid) for p in tree} == {cpu}
        assert db.describe()["cpus"] == cpu

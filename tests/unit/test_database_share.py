"""The database's share, without a database: the note that says
the database, not the server, was the bottleneck; the choice of backend; the checks of
`--mongo-backend` and `--db-cpus` against `--mongo-url`; the path check that tells when the
postgres user cannot reach the temporary directory."""

from __future__ import annotations

import pwd
from pathlib import Path

import pytest

from harness.compare import build_plan
from harness.run.analysis import database_bound_note
from harness.run_options import RunOptions
from harness.services import database, postgres
from model.errors import UserError
from model.results import Step
from model.step_figures import StepFigures


def step(offered: float, server_cpu: float, db_cpu: float | None) -> Step:
    return Step(
        offered=offered,
        unit="concurrency",
        achieved=900.0,
        replies=1000,
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=dict.fromkeys(("avg", "p50", "p90", "p99", "p99.9", "p99.99", "max"), 1.0),
        server_cpu_pct=server_cpu,
        figures=StepFigures(db_cpu_pct=db_cpu),
    )


def test_a_busy_database_beside_an_idle_server_is_named_the_bottleneck() -> None:
    steps = [step(10, 30.0, 60.0), step(20, 40.0, 97.0), step(30, 41.0, 95.0)]
    note = database_bound_note(steps, server_cores=1, database_cores=1)
    assert note is not None
    assert "the database, not the server, was the bottleneck in 2 of 3 steps" in note
    assert "at 20 concurrency FerretDB and PostgreSQL used 97 % CPU" in note
    assert "server used 40 %" in note


@pytest.mark.parametrize(
    ("server_cpu", "db_cpu", "server_cores", "database_cores"),
    [
        (95.0, 97.0, 1, 1),  # the server was busy too: not the database's alone
        (40.0, 80.0, 1, 1),  # the database had headroom
        (40.0, 150.0, 1, 2),  # pinned to two cores: 150 % is not 90 % of them
        (40.0, None, 1, 1),  # no database watched (a user's MongoDB)
    ],
)
def test_no_note_unless_the_database_is_busy_and_the_server_is_not(
    server_cpu: float, db_cpu: float | None, server_cores: int, database_cores: int
) -> None:
    steps = [step(10, server_cpu, db_cpu)]
    assert (
        database_bound_note(steps, server_cores=server_cores, database_cores=database_cores) is None
    )


def test_the_server_with_workers_has_headroom_on_its_other_cores() -> None:
    steps = [step(10, 120.0, 95.0)]  # two workers on two cores: 120 % of 200 %
    assert database_bound_note(steps, server_cores=2, database_cores=1) is not None
    assert database_bound_note(steps, server_cores=1, database_cores=1) is None


def test_postgresql_is_the_default_backend_when_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres, "bin_dir", lambda: Path("/usr/lib/postgresql/15/bin"))
    assert database.default_backend() == ("postgresql", None)
    monkeypatch.setattr(postgres, "bin_dir", lambda: None)
    backend, note = database.default_backend()
    assert backend == "sqlite"
    assert note is not None and "harness doctor --install" in note


def test_an_unknown_backend_is_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="unknown mongo backend 'mysql': choose from postgresql"):
        build_plan(
            RunOptions(
                frameworks="aiohttp",
                profile="smoke",
                settings={"sink": "mongo"},
                results_dir=tmp_path,
                mongo_backend="mysql",
            )
        )


@pytest.mark.parametrize("option", [{"mongo_backend": "sqlite"}, {"db_cpus": "0"}])
def test_the_started_databases_options_do_not_go_with_a_users_mongodb(
    tmp_path: Path, option: dict[str, str]
) -> None:
    with pytest.raises(UserError, match="--mongo-url names your own"):
        build_plan(
            RunOptions(
                frameworks="aiohttp",
                profile="smoke",
                settings={"sink": "mongo"},
                results_dir=tmp_path,
                mongo_url="mongodb://127.0.0.1:1/",
                **option,  # type: ignore[arg-type]
            )
        )


def test_a_directory_the_postgres_user_cannot_enter_is_found(tmp_path: Path) -> None:
    account = pwd.struct_passwd(("someone", "x", 65533, 65533, "", "/", "/bin/false"))
    closed = tmp_path / "closed"
    inner = closed / "inner" / "cluster"
    inner.mkdir(parents=True)
    closed.chmod(0o700)
    try:
        blocked = postgres.unreachable_ancestor(inner, account)
        assert blocked is not None
        assert blocked in (closed, *closed.parents)  # pytest's own tree is 0700 too
        open_tree = Path("/usr/lib")
        assert postgres.unreachable_ancestor(open_tree / "x", account) is None
    finally:
        closed.chmod(0o755)

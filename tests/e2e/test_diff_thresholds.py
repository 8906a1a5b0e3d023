"""Thresholds and diff through the `harness` console script: one real compare (smoke's
first step, two 1 s rounds, aiohttp) whose failing threshold gives exit 3, and the diff of
its run with itself; the other commands' exit statuses on run.json files written with
model.results (their other options are tested in-process in
tests/unit/test_diff_and_history.py)."""

from __future__ import annotations

import json
from pathlib import Path

from model.results import read_run, write_run
from tests.helpers import (
    ONE_STEP_SMOKE,
    SYNTHETIC_HOST,
    harness,
    require_framework,
    require_tools,
    synthetic_case,
    synthetic_run,
)

BASE = [10000.0, 10150.0, 9900.0, 10050.0, 9950.0]


def test_a_failing_threshold_exits_3_after_writing_everything(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    result = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", *ONE_STEP_SMOKE,
        "--set", "rounds=2", "--set", "round_duration_s=1", "--no-verify",
        "--threshold", "aiohttp: peak >= 1e9", "--threshold", "*: lost == 0",
        "--threshold", "gevent: peak >= 1",
        "--out", str(tmp_path), timeout_s=110,
    )  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    assert "thresholds: 1 held, 1 failed" in result.stdout
    assert "aiohttp: peak >= 1000000000" in result.stdout and "FAILED" in result.stdout
    assert "1 of 2 threshold checks failed" in result.stdout
    assert "threshold 'gevent: peak >= 1' matched no case in this run" in result.stdout
    (run_dir,) = tmp_path.iterdir()
    run = read_run(run_dir)
    assert run.status == "complete" and run.config["profile"]["thresholds"] == [
        "aiohttp: peak >= 1000000000",
        "*: lost == 0",
        "gevent: peak >= 1",
    ]
    failed, held = run.thresholds
    (case,) = run.cases
    assert case.summary.rounds == 2 and case.summary.peak_ci is not None
    assert (failed.held, failed.judged_on, failed.interval) == (
        False,
        "interval low end",
        case.summary.peak_ci,
    )
    assert (held.rule, held.held, held.value) == ("*: lost == 0", True, 0.0)
    report = (run_dir / "report.html").read_text()
    assert "<h3>Thresholds</h3>" in report and "1 of 2 threshold checks failed" in report
    # the run diffed with itself: nothing changed, exit 0, p 1 (a family of one: as is)
    same = harness("diff", str(run_dir), str(run_dir / "run.json"), "--json")
    assert same.returncode == 0, same.stderr
    (diffed,) = json.loads(same.stdout)["cases"]
    assert diffed["verdict"] == "no significant change" and diffed["peak"]["ratio"] == 1.0
    assert diffed["peak"]["p"] == diffed["peak"]["p_adjusted"] == 1.0


def written(directory: Path, factor: float, host: dict | None = None) -> Path:
    """A run.json of aiohttp's five rounds × `factor`, its run id the directory's name."""
    cases = [synthetic_case("aiohttp", [v * factor for v in BASE])]
    directory.mkdir()
    write_run(synthetic_run(directory.name, cases, host=host), directory)
    return directory


def test_diff_exit_statuses_through_the_console_script(tmp_path: Path) -> None:
    base = written(tmp_path / "20261201-100000.000-quick", 1.0)
    slower = written(tmp_path / "20261201-110000.000-quick", 0.8)
    other = written(tmp_path / "20261201-120000.000-quick", 1.0, {**SYNTHETIC_HOST, "cores": 8})
    same = harness("diff", str(base), str(base))
    assert same.returncode == 0 and "no significant change" in same.stdout
    worse = harness("diff", str(base), str(slower))
    assert worse.returncode == 1 and "slower beyond 1.1×: aiohttp" in worse.stdout
    refused = harness("diff", str(base), str(other))
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("harness: error: runs 20261201-100000.000-quick and")
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr


def test_history_trend_and_a_bad_threshold_through_the_console_script(tmp_path: Path) -> None:
    for hour, factor in (("10", 1.0), ("11", 0.8)):
        written(tmp_path / f"20261201-{hour}0000.000-quick", factor)
    (tmp_path / "20261201-120000.000-quick").mkdir()  # never written
    listed = harness("history", "--results", str(tmp_path), "--json")
    assert listed.returncode == 0
    rows = json.loads(listed.stdout)
    assert [(row["run"][9:11], row["status"]) for row in rows] == [
        ("12", "unreadable"),
        ("11", "complete"),
        ("10", "complete"),
    ]
    drawn = harness("trend", "--profile", "quick", "--results", str(tmp_path))
    assert drawn.returncode == 0, drawn.stderr
    assert "step: aiohttp 10,010 → 8,008 (0.80×)" in drawn.stdout
    assert f"trend: {tmp_path / 'trend-quick.png'}" in drawn.stdout.replace("\n", "")
    assert (tmp_path / "trend-quick.png").is_file()
    bad = harness("compare", "--frameworks", "aiohttp", "--threshold", "aiohttp: rps > 1")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        "harness: error: --threshold: threshold 'aiohttp: rps > 1': unknown metric 'rps': "
        "choose from peak, ratio_to_nginx, p99_ms, server_cpu_pct, tls_tax, cpu_us_per_req, "
        "memory_peak_mb, errors, lost"
    )

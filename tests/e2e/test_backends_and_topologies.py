"""The harness side of files, GridFS, memcached, baselines and process models.

Through `harness compare` against real servers, FerretDB and memcached (the pure parts:
tests/unit/test_backends_model.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from drivers.base import Target, run_step
from drivers.mcload import McLoadDriver
from drivers.wrk import WrkDriver
from harness.frameworks import select_frameworks
from harness.server_process import start_server
from harness.services.backends import MC_KEY, MC_VALUE
from harness.services.fileset import load_gridfs
from harness.services.memcached import Memcached
from model.ramps import RampStep
from model.results import read_run
from model.scenarios import SCENARIOS
from servers import FRAMEWORKS, baselines
from tests.helpers import ONE_STEP_SMOKE, harness, require_framework, require_tools


# -- the file set ------------------------------------------------------------------------
def test_gridfs_load_is_standard_gridfs_and_loaded_once(ferretdb, fileset) -> None:
    import gridfs
    from pymongo import MongoClient

    load_gridfs(ferretdb.url, fileset)
    assert load_gridfs(ferretdb.url, fileset) == 0  # already there: skipped
    client = MongoClient(ferretdb.url, serverSelectionTimeoutMS=5000)
    try:
        bucket = gridfs.GridFSBucket(client.harness)
        name = fileset.names[1]
        # any GridFS reader opens the files by name, as the servers do
        assert (
            bucket.open_download_stream_by_name(name).read()
            == (fileset.directory / name).read_bytes()
        )
    finally:
        client.close()


# -- process models ----------------------------------------------------------------------
def test_bad_process_model_is_one_line_on_the_command_line() -> None:
    result = harness("compare", "--profile", "smoke", "--process-model", "lb:zero")
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0 and "lb:zero" in result.stderr


# -- drivers -----------------------------------------------------------------------------
def test_baselines_select_the_baselines_and_all_includes_them() -> None:
    available = [n for n in baselines() if FRAMEWORKS[n].available()]
    if not available:
        pytest.skip("no baseline installed")
    assert select_frameworks("baselines") == available
    assert set(available) <= set(select_frameworks("all"))
    assert select_frameworks("aiohttp,baselines") == ["aiohttp", *available]


# -- compare runs against real backends -------------------------------------------------
def compare(tmp_path: Path, *args: str, timeout_s: float = 600) -> dict:
    """A smoke compare of one short step (what these tests check is in every step), without
    the verify pass (the servers' backend routes: test_files_gridfs_memcached)."""
    result = harness(
        "compare", "--profile", "smoke", *ONE_STEP_SMOKE, "--no-verify", "--out", str(tmp_path),
        *args, timeout_s=timeout_s,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    [run_dir] = list(tmp_path.iterdir())
    return json.loads((run_dir / "run.json").read_text())


def ok_cases(run: dict) -> list[dict]:
    cases = run["cases"]
    assert all(c["status"] == "ok" for c in cases), [(c["framework"], c["error"]) for c in cases]
    return cases


@pytest.mark.parametrize("scenario", ["files", "gridfs"])
def test_file_scenarios_report_megabytes_per_second(tmp_path: Path, scenario: str) -> None:
    require_framework("aiohttp")
    require_tools("wrk")
    run = compare(
        tmp_path, "--frameworks", "aiohttp", "--scenario", scenario, "--set", "file_count=200"
    )
    [case] = ok_cases(run)
    assert case["summary"]["megabytes_per_s_at_peak"] > 0
    assert case["summary"]["backends"]["fileset"]["count"] == 200
    assert all(step["errors"]["total"] == 0 for step in case["steps"])
    assert all(step["replies"] > 0 for step in case["steps"])


def test_file_scenario_with_siege_uses_random_urls(tmp_path: Path) -> None:
    require_framework("gevent")
    require_tools("siege")
    run = compare(
        tmp_path, "--frameworks", "gevent", "--scenario", "files", "--driver", "siege",
        "--set", "file_count=100",
    )  # fmt: skip
    [case] = ok_cases(run)
    # siege reports MB/s for every step (its own failures, if any, are counted as errors)
    assert all(step["figures"]["megabytes_per_s"] > 0 for step in case["steps"]), case["steps"]
    urls = list(tmp_path.glob("*/*/ramp/raw/urls.txt"))
    assert urls and len(urls[0].read_text().split()) == 100


@pytest.mark.parametrize("scenario", ["memcache-http", "memcache-socket"])
def test_memcache_scenarios_check_every_answer(tmp_path: Path, scenario: str) -> None:
    require_framework("twisted")
    require_tools("wrk", "memcached")
    run = compare(tmp_path, "--frameworks", "twisted", "--scenario", scenario)
    [case] = ok_cases(run)
    assert case["driver"] == ("mcload" if scenario == "memcache-socket" else "wrk")
    for step in case["steps"]:
        assert step["replies"] > 0 and step["errors"]["total"] == 0
        # mcload keeps its whole histogram (its processes' merged); wrk only percentiles
        assert ("latency" in step["histograms"]) == (scenario == "memcache-socket")
        assert step["latency_ms"]["p99.9"] is not None
    assert case["summary"]["backends"]["memcached"]["value_bytes"] == 100


def test_wrong_answers_are_errors(tmp_path: Path) -> None:
    """memcached holding another value than the one checked: every answer is wrong."""
    require_framework("aiohttp")
    require_tools("wrk", "memcached")
    with Memcached() as service:
        service.set(MC_KEY, b"x" * len(MC_VALUE))
        args = ["--memcached", service.address, "--mc-socket-port", "0"]
        with start_server("aiohttp", extra_args=args) as server:
            step = RampStep(0, offered=10, unit="concurrency", duration_s=2)
            http = Target("127.0.0.1", server.port, SCENARIOS["memcache-http"],
                          expected_body=MC_VALUE)  # fmt: skip
            result = run_step(WrkDriver(), step, http, None, tmp_path, "http")
            assert result.errors["wrong"] > 100 and result.replies == 0
            mc_port = server.telemetry_lines()[0]["mc_port"]
            socket_target = Target("127.0.0.1", mc_port, SCENARIOS["memcache-socket"],
                                   expected_body=MC_VALUE)  # fmt: skip
            result = run_step(McLoadDriver(), step, socket_target, None, tmp_path, "socket")
            assert result.errors["wrong"] > 100 and result.replies == 0


def test_baselines_beside_a_framework_carry_ratios_to_nginx(tmp_path: Path) -> None:
    require_framework("nginx")
    require_framework("aiohttp")
    require_tools("wrk")
    run = compare(tmp_path, "--frameworks", "nginx,aiohttp")
    cases = {c["framework"]: c for c in ok_cases(run)}
    assert cases["nginx"]["summary"]["role"] == "baseline"
    assert cases["aiohttp"]["summary"]["role"] == "framework"
    assert cases["nginx"]["summary"]["ratio_to_nginx"] == 1.0
    ratio = cases["aiohttp"]["summary"]["ratio_to_nginx"]
    peaks = cases["aiohttp"]["summary"]["peak"] / cases["nginx"]["summary"]["peak"]
    assert ratio == pytest.approx(peaks, abs=0.001)


def test_unsupported_scenario_is_skipped_for_a_baseline(tmp_path: Path) -> None:
    require_framework("nginx")
    require_tools("wrk")
    result = harness(
        "compare", "--profile", "smoke", "--out", str(tmp_path), "--frameworks", "nginx",
        "--scenario", "counter", timeout_s=120,
    )  # fmt: skip
    [run_dir] = list(tmp_path.iterdir())
    [case] = read_run(run_dir).cases
    assert case.status == "skipped" and "not supported" in (case.error or "")
    assert result.returncode == 1  # nothing ran


def test_smoke_compare_behind_a_load_balancer(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_tools("wrk", "nginx")
    run = compare(tmp_path, "--frameworks", "aiohttp", "--process-model", "lb:2")
    [case] = ok_cases(run)
    assert case["process_model"] == "lb:2"
    topology = case["summary"]["topology"]
    assert len(topology["instances"]) == 2 and topology["balancer"]["kind"] == "nginx"
    assert len({i["port"] for i in topology["instances"]}) == 2
    if len(os.sched_getaffinity(0)) >= 2:
        assert all(i["cpus"] is not None for i in topology["instances"])
    assert all(step["replies"] > 0 and step["errors"]["total"] == 0 for step in case["steps"])

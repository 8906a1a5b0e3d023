"""`harness bench --ws` end to end: our server and the runtime's minimal WebSocket server
hold real idle connections from the agent, and the figures come back real."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model.bench import read_bench_run
from tests.helpers import harness, require_framework

CONNECTIONS = 600


@pytest.mark.parametrize("framework", ["aiohttp", pytest.param("gevent", marks=pytest.mark.slow)])
def test_bench_ws_gives_kb_and_cpu_per_connection_of_ours_and_the_minimal_server(
    framework: str, tmp_path: Path
) -> None:
    require_framework(framework)
    done = harness(
        "bench", "--ws", "--frameworks", framework, "--connections", str(CONNECTIONS),
        "--rounds", "2", "--hold", "1", "--open-rate", "600", "--json",
        "--results", str(tmp_path), timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(done.stdout)
    assert result["framework"] == framework and result["rounds"] == 2
    # both apps held every connection, none failed
    assert result["ours_held_min"] == result["minimal_held_min"] == CONNECTIONS
    assert result["failed"] == {"ours": 0, "minimal": 0} and result["note"] is None
    assert result["failed_reasons"] == {"ours": {}, "minimal": {}}  # the same, by reason
    assert all(run["failed_reasons"] == {} for run in result["ours_runs"] + result["minimal_runs"])
    for figure in ("memory", "rss", "cpu"):
        measured = result[figure]
        assert measured["ours"] > 0 and measured["minimal"] > 0, (figure, measured)
        low, high = measured["ci"]
        assert low <= measured["ratio"] <= high, (figure, measured)
        assert measured["verdict"] in ("within", "above", "undecided")
    # an idle WebSocket costs kilobytes, not bytes nor megabytes, on either app
    assert 1 < result["memory"]["ours"] < 200 and 1 < result["memory"]["minimal"] < 200
    # the framework's line was said on stderr as it finished, with the same figures
    line = next(x for x in done.stderr.splitlines() if x.startswith(f"bench --ws {framework}:"))
    assert f"KB/conn {result['memory']['ours']:.1f} · {result['memory']['minimal']:.1f}" in line
    # and kept as a bench ws run: each round's figures, the ratios and verdicts
    (kept,) = tmp_path.iterdir()
    run = read_bench_run(kept)
    assert (run.kind, run.status, kept.name.endswith("-bench-ws")) == ("ws", "complete", True)
    (case,) = run.cases
    assert [f.name for f in case.figures] == ["KB/conn", "RSS KB/conn", "CPU µs/conn"]
    memory, _, cpu = case.figures
    assert memory.ratio == result["memory"]["ratio"] and cpu.ratio_ci == tuple(result["cpu"]["ci"])
    assert len(memory.ours) == len(cpu.minimal) == 2 and case.details["connections"] == CONNECTIONS
    assert f"kept: {kept}" in done.stderr  # on stderr: --json's stdout is one document


def test_bench_ws_is_a_subcommand_too() -> None:
    shown = harness("bench", "ws", "--help")
    assert shown.returncode == 0 and "Usage: harness bench ws" in shown.stdout
    assert harness("bench", "--ws", "--help").stdout == shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--frameworks", "nginx"], "none of nginx has a minimal WebSocket server"),
        (["--frameworks", "aiohttp", "--connections", "30000", "--workers", "1"],
         "--connections must be"),
        (["--frameworks", "aiohttp", "--connections", "1000000"],
         "1,000,000 connections need"),
        (["--frameworks", "aiohttp", "--protocol", "h1-tls"], "cleartext HTTP/1.1 (h1) only"),
        (["--frameworks", "aiohttp", "--rounds", "1"], "--ws needs --rounds >= 2"),
    ],
)  # fmt: skip
def test_bench_ws_refuses_what_it_cannot_measure_in_one_line(args: list[str], message: str) -> None:
    refused = harness("bench", "--ws", *args)
    assert refused.returncode == 1
    assert refused.stderr.startswith("harness: error: ") and message in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_workers_and_a_fleet_are_refused_without_ws() -> None:
    refused = harness("bench", "--frameworks", "aiohttp", "--workers", "2")
    assert refused.returncode == 1
    assert "--workers and --fleet go with --ws" in refused.stderr

"""Rounds to a precision, end to end through the `harness` console script: a server made
10 % slower on purpose (tests/spin_server.py with a fixed amount of CPU work added per
request) is found slower by `harness diff --pair` with p < 0.05, and each run's summary
says how precise its peak got.

The slower server is compared with the unchanged one in one run, their rounds interleaved,
and the pair diffed: a shift of the machine's speed between two runs falls on one side
only. `slow` (about 3 minutes), and it needs a machine whose speed holds within a few per
cent for seconds at a time: on 2026-12-05 this VM's speed shifted by ±15 % from one 3 s
or 8 s round to the next (the spin server alone: 80,000 to 115,000 replies a second in
one run), and the test failed in 2 of 2 tries this way and in 4 of 5 as two runs —
though with a server ~6 % slower, not 10 % (its loop timed at the wrong count: see
`iterations_costing`); made 10 % slower, it passed 3 of 3 the same day.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.run.analysis import usable_rounds
from harness.run.precision import case_precise, per_second_spread
from model.results import read_run
from tests.helpers import ONE_STEP_SMOKE, harness, require_framework, require_tools
from tests.spin_server import spin

pytestmark = pytest.mark.serial  # rounds until precise, and a 10 % slower server found slower

SPIN_SERVER = Path(__file__).resolve().parent.parent / "spin_server.py"
SLOWER = 0.10  # what the spin adds: a tenth of a request's cost


def call_us(iterations: int) -> float:
    """One call of spin(iterations) here, in µs (the best of three timings of many calls:
    the least disturbed)."""
    calls = max(1, 200_000 // max(1, iterations))
    best_s = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            spin(iterations)
        best_s = min(best_s, time.perf_counter() - started)
    return best_s / calls * 1e6


def iterations_costing(target_us: float) -> int:
    """The loop iterations whose call costs `target_us`, timed at about that count: a long
    loop's iterations cost more each (past 256 its integers are no longer cached), so a
    rate taken from spin(200_000) gave 0.69 µs for a 1.08 µs target here and a server ~6 %
    slower, not 10 %."""
    iterations = max(1, round(target_us / call_us(100) * 100))
    for _ in range(2):  # two corrections from the cost at the count itself
        iterations = max(1, round(iterations * target_us / call_us(iterations)))
    return iterations


def spin_command(name: str, iterations: int) -> str:
    """The spin server as a `--server NAME=COMMAND`."""
    return (
        f"{name}={sys.executable} {SPIN_SERVER} --host {{host}} --port {{port}} --spin {iterations}"
    )


def run_spin(out: Path) -> Path:
    """One run of the spin server (as the case `spin`) to ±2 %; its results directory."""
    result = harness(
        "run", "--framework", "spin", "--server", spin_command("spin", 0), "--profile", "smoke",
        "--precision", "2", "--max-time", "35", "--set", "rounds=5",
        "--set", "round_duration_s=2", "--no-verify", "--out", str(out), timeout_s=150,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "precision: ±2 % asked" in result.stdout
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.mark.slow
@pytest.mark.timeout(420)  # a run of about 50 s, a compare of about 150 s, and the diff
def test_a_server_made_ten_percent_slower_is_found_slower(tmp_path: Path) -> None:
    require_tools("wrk")
    fast_dir = run_spin(tmp_path / "fast")
    (fast,) = read_run(fast_dir).cases
    assert fast.status == "ok" and fast.summary.peak
    assert fast.summary.rounds >= 5 and fast.summary.precision_pct == 2.0
    assert fast.summary.half_width_pct is not None
    assert ("imprecise" in fast.summary.flags) == (fast.summary.half_width_pct > 2.0)
    # a request's cost on the server's one core, and a tenth of it as loop iterations
    cost_us = 1e6 / fast.summary.peak
    iterations = iterations_costing(SLOWER / (1 - SLOWER) * cost_us)
    compared = harness(
        "compare", "--frameworks", "spin,spin-slow", "--server", spin_command("spin", 0),
        "--server", spin_command("spin-slow", iterations), "--profile", "smoke",
        "--precision", "2", "--max-time", "120", "--set", "rounds=10",
        "--set", "round_duration_s=3", "--no-verify", "--out", str(tmp_path / "pair"),
        timeout_s=300,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr
    (pair_dir,) = (tmp_path / "pair").iterdir()
    diffed = harness(
        "diff", str(pair_dir), "--pair", "spin=spin-slow", "--json", "--factor", "1.05"
    )
    (case,) = json.loads(diffed.stdout)["cases"]
    cases = {c.framework: c for c in read_run(pair_dir).cases}
    widths = {name: c.summary.half_width_pct for name, c in cases.items()}
    rounds = {name: [round(s.achieved) for s in c.rounds] for name, c in cases.items()}
    assert case["label"] == "spin → spin-slow"
    assert case["verdict"] == "slower", (case["peak"], widths, rounds)
    assert case["peak"]["p"] < 0.05 and case["peak"]["ci"][1] < 1.0
    assert diffed.returncode == 1  # slower beyond the factor


ROUND_S = 2.0  # two whole seconds of telemetry in each round


def test_rounds_stop_as_soon_as_a_case_is_precise_or_the_budget_is_spent(tmp_path: Path) -> None:
    """aiohttp (its telemetry gives per-second replies) to ±10 %, at least 3 rounds of 2 s,
    within 20 s of run after a one-step ramp: the rounds stopped at the first that made the
    case precise, or it is `imprecise` with its reason and noise source; every round says
    its length and seconds."""
    require_framework("aiohttp")
    require_tools("wrk")
    result = harness(
        "run", "--framework", "aiohttp", "--profile", "smoke", *ONE_STEP_SMOKE,
        "--precision", "10", "--max-time", "20", "--set", "rounds=3",
        "--set", f"round_duration_s={ROUND_S}", "--no-verify", "--out", str(tmp_path),
        timeout_s=150,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "precision: ±10 % asked" in result.stdout
    (run_dir,) = tmp_path.iterdir()
    (case,) = read_run(run_dir).cases
    summary = case.summary
    assert summary.precision_pct == 10.0 and summary.rounds == len(case.rounds) >= 2
    assert all(s.figures.round_s >= ROUND_S and s.figures.replies_per_s for s in case.rounds)
    peaks = [s.achieved for s in usable_rounds(case.rounds)]
    if "imprecise" in summary.flags:
        assert summary.imprecise_reason and summary.imprecise_reason.endswith("asked ±10 %")
        # the source is read from the rounds' CPU flags or their per-second replies: a
        # 2 s round may hold only one whole second of them, and then it is not attributed
        counted = usable_rounds(case.rounds) or list(case.rounds)
        if summary.noise_source == "unknown":
            assert per_second_spread(counted) is None, case.rounds
        else:
            assert summary.noise_source in ("server", "load generator", "machine")
    else:  # precise now, and not one round earlier (from the minimum on)
        assert case_precise(peaks, 10.0) and summary.half_width_pct <= 10.0  # type: ignore[operator]
        assert summary.rounds == 3 or not case_precise(peaks[:-1], 10.0)
    assert f"±{summary.half_width_pct:.1f}" in result.stdout


def test_bench_gives_the_paired_ratio_with_its_interval(tmp_path: Path) -> None:
    """Three rounds of 1 s a side, no precision asked: the ratio ours / minimal is the
    geometric mean of the three rounds' ratios, inside its 95 % interval."""
    require_framework("aiohttp")
    require_tools("wrk")
    result = harness(
        "bench", "--frameworks", "aiohttp", "--rounds", "3", "--duration", "1",
        "--precision", "0", "--json", "--results", str(tmp_path), timeout_s=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    (row,) = json.loads(result.stdout)
    assert row["framework"] == "aiohttp" and row["rounds"] == 3
    low, high = row["ratio_ci"]
    assert low <= row["ratio"] <= high and row["imprecise_reason"] is None
    assert row["half_width_pct"] == pytest.approx(100 * (high - low) / 2 / row["ratio"])
    assert row["verdict"] in ("within", "outside", "undecided")  # against ≥ 0.95×

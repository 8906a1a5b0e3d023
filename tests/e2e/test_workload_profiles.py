"""The boards' workload profiles end to end: `harness compare --profile P` on two servers
with short steps, every case verified, measured with intervals, nothing lost; the delay
profile reports the requests each server held in flight."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.run.delay import delay_ms_of, held_in_flight
from model.results import read_run
from model.scenarios import SCENARIOS
from tests.helpers import harness, require_framework, require_tools

# a framework and a baseline that serve every workload
SERVERS = ("aiohttp", "node-http")
# short: two ramp steps of a second, two rounds of a second, no warm-up
SHORT = ("ramp.duration_s=1", "rounds=2", "round_duration_s=1", "warmup_s=0", "cooldown_s=0")
LEVELS = {"delay": "4,16", "upload": "4,8"}


PROFILES = ("json", "plaintext", "delay", "upload", "json-comp")


# What a profile runs is the harness's: in the default run each profile on one of the two
# servers (in turn, so each serves some), both in the slow run. Each server's own answers
# on every workload route are checked by test_conformance in the default run.
@pytest.mark.parametrize(
    ("profile", "servers"),
    [
        *(pytest.param(p, (SERVERS[i % 2],), id=p) for i, p in enumerate(PROFILES)),
        *(pytest.param(p, SERVERS, id=f"{p}-both", marks=pytest.mark.slow) for p in PROFILES),
    ],
)
def test_a_workload_profile_measures_every_server_with_intervals(
    tmp_path: Path, profile: str, servers: tuple[str, ...]
) -> None:
    require_tools("wrk")
    for name in servers:
        require_framework(name)
    overrides = [*SHORT, f"ramp.levels={LEVELS.get(profile, '8,32')}"]
    result = harness(
        "compare",
        "--frameworks",
        ",".join(servers),
        "--profile",
        profile,
        "--out",
        str(tmp_path),
        *[arg for override in overrides for arg in ("--set", override)],
        timeout_s=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = list(tmp_path.iterdir())
    run = read_run(run_dir)
    assert [c.framework for c in run.cases] == list(servers)
    for case in run.cases:
        assert case.status == "ok", case.error
        assert case.verify and all(check["ok"] for check in case.verify.values())
        assert case.summary.peak_ci is not None  # rounds: a 95 % interval
        for step in (*case.steps, *case.rounds):
            assert step.errors["total"] == 0, step
            assert step.replies > 0
        if profile == "plaintext":
            # wrk counts each of the 16 pipelined responses, not each write: a response's
            # bytes, not 16 of them, per reply
            step = case.steps[-1]
            per_reply = step.figures.bytes_read / step.figures.requests
            assert 100 < per_reply < 300, per_reply
        if profile == "delay":
            delay_ms = delay_ms_of(SCENARIOS[case.scenario].path)
            assert delay_ms is not None
            assert case.summary.held_in_flight == held_in_flight(case.steps, delay_ms)
    if profile == "delay":
        assert "requests held in flight" in result.stdout


def test_a_driver_that_cannot_pipeline_is_refused_for_plaintext(tmp_path: Path) -> None:
    result = harness(
        "compare",
        "--frameworks",
        "aiohttp",
        "--profile",
        "plaintext",
        "--driver",
        "ab",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 1
    assert "cannot send what the plaintext scenario needs (pipelining)" in result.stderr

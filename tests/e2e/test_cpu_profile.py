"""--cpu-profile end to end: a smoke compare of aiohttp and eventlet (py-spy; eventlet's
greenlets defeat its native frames, so it is sampled without), nginx and node-express
(perf on the software clock; Node started to name its JS frames for it) gets one more,
sampled round per case, kept out of the intervals; each case's CPU µs/request split by
category, the parts summing to it, the sampler's own CPU beside it, the stacks kept as
profile.folded and listed in FILES.md; and a server given as a command that spends its
requests in one function has that function on top."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from model.cpu_split import CATEGORIES
from model.results import read_run
from model.stacks import parse_folded, total_samples
from tests.e2e.test_precision import SPIN_SERVER, iterations_costing
from tests.helpers import harness, require_tools


@pytest.mark.timeout(360)  # the compare's own bound (300 s), and reading its results
def test_a_smoke_compare_splits_each_servers_cpu_per_request(tmp_path: Path) -> None:
    require_tools("wrk", "nginx", "node", "py-spy", "perf")
    markdown = tmp_path / "run.md"
    done = harness(
        "compare", "--frameworks", "aiohttp,eventlet,nginx,node-express", "--profile", "smoke",
        "--cpu-profile", "--results", str(tmp_path / "runs"), "--markdown", str(markdown),
        timeout_s=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = read_run(run_dir)
    assert "kept out of the intervals" in run.config["cpu_profile"]
    samplers = {}
    for case in run.cases:
        assert case.status == "ok", case.error
        assert not case.rounds  # the profiled round is not a confirmation round
        profile = case.summary.cpu_profile
        assert profile is not None and profile["error"] is None, profile
        samplers[case.framework] = profile["sampler"]
        parts = profile["parts_us"]
        assert set(parts) == set(CATEGORIES)
        measured = case.summary.cpu_us_per_req
        assert profile["split_of_us_per_req"] == measured
        assert sum(parts.values()) == pytest.approx(measured, rel=0.10)
        assert profile["sampler_cpu_s"] > 0 and profile["sampler_cpu_us_per_req"] > 0
        assert profile["top_frames"]
        folded = parse_folded((run_dir / profile["file"]).read_text())
        assert total_samples(folded) == profile["samples"] > 0
        assert profile["file"].endswith("profiled-round/profile.folded")
    assert samplers == {
        "aiohttp": "py-spy", "eventlet": "py-spy", "nginx": "perf", "node-express": "perf"
    }  # fmt: skip
    nginx = next(c for c in run.cases if c.framework == "nginx").summary.cpu_profile
    assert "software cpu-clock" in nginx["note"]
    assert nginx["parts_us"]["kernel"] > nginx["parts_us"]["handler"]
    # py-spy cannot merge native frames on eventlet's greenlets: it samples without them
    eventlet = next(c for c in run.cases if c.framework == "eventlet").summary.cpu_profile
    assert "no native frames" in eventlet["note"], eventlet["note"]
    express = next(c for c in run.cases if c.framework == "node-express").summary.cpu_profile
    assert express["parts_us"]["framework"] > 0  # JS frames named: Express, Node's HTTP
    assert any(".js)" in f["frame"] for f in express["top_frames"]), express["top_frames"]
    assert "profile.folded" in (run_dir / "FILES.md").read_text()
    assert "CPU per request: where the µs go" in done.stdout
    assert "**CPU per request**" in markdown.read_text()
    assert 'class="cpu-split"' in (run_dir / "report.html").read_text()


def test_a_command_that_spends_its_requests_in_one_function_has_it_on_top(
    tmp_path: Path,
) -> None:
    require_tools("wrk", "py-spy")
    iterations = iterations_costing(300)  # ~0.3 ms of CPU per request in spin()
    command = f"spin={sys.executable} {SPIN_SERVER} --host {{host}} --port {{port}} "
    done = harness(
        "run", "--framework", "spin", "--server", command + f"--spin {iterations}",
        "--profile", "smoke", "--cpu-profile", "--no-verify", "--out", str(tmp_path),
        timeout_s=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run_dir,) = tmp_path.iterdir()
    (case,) = read_run(run_dir).cases
    profile = case.summary.cpu_profile
    assert profile is not None and profile["error"] is None, profile
    top = profile["top_frames"][0]
    assert top["frame"].startswith("spin (") and "spin_server.py" in top["frame"], top
    assert top["share"] > 0.5


def test_a_sampler_that_cannot_attach_says_why_in_one_line(tmp_path: Path) -> None:
    from harness.cpu_sampler import CpuSampler

    require_tools("perf")
    sampler = CpuSampler(tmp_path, None)
    sampler.start([2**22 + 1])  # above the kernel's pid_max: no such process
    result = sampler.stop()
    assert result.sampler == "perf" and not result.folded
    assert result.error is not None and result.error.startswith("perf could not attach: ")
    assert "\n" not in result.error


def test_bench_http_profiles_ours_and_the_minimal_app_out_of_the_ratio(tmp_path: Path) -> None:
    import json

    require_tools("wrk", "py-spy")
    done = harness(
        "bench", "http", "--frameworks", "aiohttp", "--rounds", "2", "--precision", "0",
        "--duration", "1", "--cpu-profile", "--json", "--results", str(tmp_path),
        timeout_s=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = json.loads(done.stdout)
    assert row["rounds"] == 2 and len(row["ours_per_round"]) == 2  # the sampled runs apart
    profiles = row["cpu_profile"]
    assert set(profiles) == {"ours", "minimal"}
    (run_dir,) = tmp_path.iterdir()
    for app, profile in profiles.items():
        assert profile["error"] is None, profile
        assert profile["sampler"] == "py-spy" and profile["samples"] > 0
        assert sum(profile["parts_us"].values()) == pytest.approx(
            profile["cpu_us_per_req"], rel=0.01
        )
        assert profile["parts_us"]["framework"] > 0, (app, profile["top_frames"])
        assert profile["file"] == f"aiohttp-h1-profiled/{app}/profile.folded"
        assert (run_dir / profile["file"]).is_file()

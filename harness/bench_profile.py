"""`harness bench http --cpu-profile`: after the rounds, one more wrk run against each app
(ours, then the minimal one) with a CPU sampler on its process tree (harness.cpu_sampler):
where each app's CPU µs per request go, split by the rules compare's profiled round uses
(harness.run.profiled.sampled_record). Kept out of the ratio: sampling slows a server.

An app's CPU is its process tree's (user + system) over the sampled run, per reply; the
stacks go to `<run>/<framework>-<protocol>-profiled/<app>/profile.folded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from drivers.base import Target, run_step
from drivers.protocol import Driver
from harness.cpu_sampler import CpuSampler, SamplerResult, process_tree, sampling
from harness.run.profiled import PROFILE_FILE, sampled_record
from model.ramps import RampStep
from model.stacks import folded_text

APPS = ("ours", "minimal")


def tree_cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) of `pid` and its descendants alive now."""
    total = 0.0
    for member in process_tree([pid]):
        try:
            times = psutil.Process(member).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def profile_apps(
    framework: str,
    apps: Mapping[str, tuple[int, Target]],
    driver: Driver,
    step: RampStep,
    load_cpus: str,
    raw_dir: Path,
    out_dir: Path,
) -> dict[str, dict[str, Any]]:
    """Each app of `apps` (name → its process id and target) sampled through one `step`:
    its record (sampled_record), by name."""
    return {
        name: _profile_app(framework, name, pid, target, driver, step, load_cpus, raw_dir, out_dir)
        for name, (pid, target) in apps.items()
    }


def _profile_app(
    framework: str,
    name: str,
    pid: int,
    target: Target,
    driver: Driver,
    step: RampStep,
    load_cpus: str,
    raw_dir: Path,
    out_dir: Path,
) -> dict[str, Any]:
    app_dir = out_dir / name
    sampler = CpuSampler(app_dir / "sampler", load_cpus)
    with sampling(sampler, lambda: [pid]):
        before_s = tree_cpu_s(pid)  # once the sampler is attached: the run's CPU only
        result = run_step(driver, step, target, load_cpus, raw_dir, f"{name}-profiled")
        used_s = tree_cpu_s(pid) - before_s
    sampled = sampler.result or SamplerResult(sampler.sampler or "none", error="never attached")
    if sampled.folded:
        (app_dir / PROFILE_FILE).write_text(folded_text(sampled.folded))
    return sampled_record(
        framework,
        sampled,
        file=f"{out_dir.name}/{name}/{PROFILE_FILE}",
        replies=result.replies,
        achieved=result.rate,
        cpu_us_per_req=round(used_s * 1e6 / result.replies, 2) if result.replies else None,
    )

"""`--cpu-profile`: one more round at each case's peak, after the ramp and the confirmation
rounds, during which the server's process tree is sampled (harness.cpu_sampler). It is
kept out of the intervals (sampling slows a server); its figures go to the case's
`summary.cpu_profile`, its stacks to `<case>/profiled-round/profile.folded`.

The split (model.cpu_split) is of the sampled CPU: each category's samples × the sampling
period over the round's replies. Beside it the CPU µs/request the round measured (the
server's cgroup or process tree, as every step) and how far the parts' sum is from it
(samples a sampler lost, or a tree it did not see whole).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from harness.cpu_sampler import CpuSampler, SamplerResult
from harness.run.context import RunContext
from harness.run.outputs import case_folder
from harness.run.peak import combine_repeats
from model.cpu_split import cpu_parts_us, sampled_us_per_req, split_stacks
from model.results import Case
from model.stacks import folded_text, total_samples

K = TypeVar("K")
PROFILED_LABEL = "profiled round"
PROFILE_FILE = "profile.folded"
TOP_FRAMES = 15
SLOWED_SHARE = 0.5
CPU_PROFILE_NOTE = (
    "one more round at each case's peak with a CPU sampler attached to the server's "
    "process tree; kept out of the intervals"
)


def peaked_cases(by_key: Mapping[K, Sequence[Case]]) -> dict[K, Case]:
    """The cases (repeats combined) that reached a peak: the ones a round can be run at."""
    combined = {key: combine_repeats(list(runs)) for key, runs in by_key.items()}
    return {
        key: case
        for key, case in combined.items()
        if case.status == "ok" and case.summary.peak_offered is not None
    }


def with_profiles(cases: Sequence[Case], profiles: Mapping[Any, dict[str, Any]]) -> list[Case]:
    """`cases` each with its profiled round's record (keyed by case_key), where it has one."""
    result = []
    for case in cases:
        record = profiles.get(case_key(case))
        if record is not None:
            case = dataclasses.replace(
                case, summary=dataclasses.replace(case.summary, cpu_profile=record)
            )
        result.append(case)
    return result


def case_key(case: Case) -> tuple[str, str, str, str]:
    """The runner's key of a case: framework, affinity mode, process model, protocol."""
    return (case.framework, case.affinity.get("mode") or "both", case.process_model, case.protocol)


def run_profiled_round(run: RunContext, case: Case) -> dict[str, Any]:
    """The profiled round of `case` (an ok case with a peak): its `cpu_profile` record."""
    # the runner's rounds (verifiers, HTTP clients) load here: `harness bench` imports this
    # module's rules (sampled_record) and checks its command line first
    from harness.run.rounds import run_round

    round_dir = case_folder(run.plan.out_dir, case.key, round_label=PROFILED_LABEL)
    sampler = CpuSampler(round_dir / "sampler", run.plan.load_cpus)
    sampled_run = dataclasses.replace(run, step_sampler=sampler)
    measured = run_round(sampled_run, case, 0, label=PROFILED_LABEL)
    result = sampler.result or SamplerResult(sampler.sampler or "none", error="never attached")
    if measured.status != "ok" or not measured.steps:
        result.error = result.error or f"the profiled round failed: {measured.error}"
    if result.folded:
        round_dir.mkdir(parents=True, exist_ok=True)
        (round_dir / PROFILE_FILE).write_text(folded_text(result.folded))
    folder = f"{case.key}/{round_dir.name}"
    record = profile_record(
        case.framework, result, measured, folder, case_cpu_us=case.summary.cpu_us_per_req
    )
    slowed = slowed_note(record.get("achieved"), case.summary.peak)
    if slowed:
        record["note"] = "; ".join(filter(None, (record["note"], slowed)))
    return record


def slowed_note(achieved: float | None, peak: float | None) -> str | None:
    """What to say when the sampler held the server under SLOWED_SHARE of its peak: the
    split is then of a slower server's work (its shares, not its figures, carry over)."""
    if achieved is None or not peak or achieved >= SLOWED_SHARE * peak:
        return None
    return f"the sampled round ran at {achieved / peak:.2f}× the peak: the sampler slowed it"


def profile_record(
    framework: str,
    result: SamplerResult,
    measured: Case,
    folder: str,
    case_cpu_us: float | None = None,
) -> dict[str, Any]:
    """`summary.cpu_profile`: the sampler, the split of the case's CPU µs/request
    (`case_cpu_us`; without it the round's own), the round's measured and sampled figures
    (how far apart), the sampler's own CPU, the top frames."""
    step = measured.steps[0] if measured.steps else None
    return sampled_record(
        framework,
        result,
        file=f"{folder}/{PROFILE_FILE}",
        replies=step.replies if step is not None else 0,
        achieved=step.achieved if step is not None else None,
        cpu_us_per_req=step.cpu_us_per_req if step is not None else None,
        case_cpu_us=case_cpu_us,
    )


def sampled_record(
    framework: str,
    result: SamplerResult,
    *,
    file: str,
    replies: int,
    achieved: float | None,
    cpu_us_per_req: float | None,
    case_cpu_us: float | None = None,
) -> dict[str, Any]:
    """A sampled run's record (a profiled round's, a bench's profiled run's): `result`
    split by category over the run's `replies`, against its measured `cpu_us_per_req`
    (the figure split: `case_cpu_us` when given), its stacks kept as `file`."""
    record: dict[str, Any] = {
        "sampler": result.sampler,
        "note": result.note,
        "error": result.error,
        "sample_rate_hz": result.sample_rate_hz,
        "samples": total_samples(result.folded),
        "achieved": achieved,
        "replies": replies,
        "cpu_us_per_req": cpu_us_per_req,
        "sampler_cpu_s": result.sampler_cpu_s,
        "sampler_cpu_us_per_req": round(result.sampler_cpu_s * 1e6 / replies, 2)
        if replies
        else None,
        "file": file if result.folded else None,
    }
    split = split_stacks(result.folded, framework, kernel_frames=result.sampler == "perf")
    measured_us = record["cpu_us_per_req"]
    base_us = case_cpu_us or measured_us  # the case's figure; else the round's
    if not split.total or base_us is None:
        return {**record, "parts_us": None, "top_frames": []}
    parts = cpu_parts_us(split, base_us)
    sampled = sampled_us_per_req(split, sample_period_s=1 / result.sample_rate_hz, replies=replies)
    coverage = (
        round(100 * (sampled - measured_us) / measured_us, 1)
        if sampled is not None and measured_us
        else None
    )
    return {
        **record,
        "idle_samples": split.idle_samples,
        "split_of_us_per_req": base_us,
        "parts_us": parts,
        "parts_sum_us": round(sum(parts.values()), 2),
        "sampled_cpu_us_per_req": sampled,
        "sampled_vs_measured_pct": coverage,
        "top_frames": split.top_frames(TOP_FRAMES),
    }

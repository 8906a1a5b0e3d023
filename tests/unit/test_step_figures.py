"""A step's typed figures (model.step_figures) and schema harness.run/6: a wrong name fails
at once, every /5 `extra` key moves into `figures`, and no package reads `extra` any more."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from drivers.base import DriverResult, merge_results, no_latency
from model.results import SCHEMA, SCHEMA_5, read_run, run_from_dict, write_run
from model.step_figures import (
    FIGURE_NAMES,
    CgroupCounters,
    StepFigures,
    figures_from_dict,
    figures_reference_markdown,
    figures_to_dict,
)

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data"
PACKAGES = ("harness", "drivers", "charts", "servers")


def test_a_figure_the_record_does_not_declare_fails_at_once() -> None:
    with pytest.raises(TypeError, match="megabytes_per_sec"):
        StepFigures(megabytes_per_sec=1.0)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"unknown step figures \['sparkle'\]"):
        figures_from_dict({"open": 3, "sparkle": 1})


def test_figures_are_written_without_their_nones_and_read_back_equal() -> None:
    cgroup = CgroupCounters(
        cpu_s=1.5, periods=10, throttled_periods=2, throttled_s=0.1, oom_kills=0, memory_bytes=None
    )
    figures = StepFigures(duration_s=2.0, cgroup=cgroup, other_cpu_pct={"server": 1.0})
    written = figures_to_dict(figures)
    assert set(written) == {"duration_s", "cgroup", "other_cpu_pct"}
    assert written["cgroup"]["memory_bytes"] is None  # a nested record is written whole
    assert figures_from_dict(json.loads(json.dumps(written))) == figures


def test_side_by_side_processes_sum_their_numeric_figures_only() -> None:
    one = DriverResult(10, 1.0, {}, no_latency(), figures=StepFigures(requests=10, cipher="X"))
    two = DriverResult(20, 1.0, {}, no_latency(), figures=StepFigures(requests=20, cipher="X"))
    assert merge_results([one, two]).figures == StepFigures(requests=30, processes=2)


@pytest.mark.parametrize("name", ["run_v1", "run_v1_ws", "run_v2", "run_v3", "run_v4", "run_v5"])
def test_every_old_extra_key_is_a_figure_of_the_same_value(name: str) -> None:
    on_disk = json.loads((DATA / name / "run.json").read_text())
    run = read_run(DATA / name)
    assert run.schema == SCHEMA
    for case, written in zip(run.cases, on_disk["cases"], strict=True):
        pairs = [*zip(case.steps, written["steps"], strict=True)]
        pairs += zip(case.rounds, written.get("rounds", ()), strict=True)
        for step, old in pairs:
            assert figures_to_dict(step.figures) == {
                k: v for k, v in old.get("extra", {}).items() if v is not None
            }


def test_a_run_5_file_is_rewritten_as_run_6_with_figures_and_reads_back_equal(
    tmp_path: Path,
) -> None:
    assert json.loads((DATA / "run_v5" / "run.json").read_text())["schema"] == SCHEMA_5
    run = read_run(DATA / "run_v5")
    assert any(s.figures.round is not None for c in run.cases for s in c.rounds)
    write_run(run, tmp_path)
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["schema"] == SCHEMA == "harness.run/6"
    for case in written["cases"]:
        for step in (*case["steps"], *case["rounds"]):
            assert "extra" not in step
            assert None not in step["figures"].values()
    assert read_run(tmp_path) == run


def _run_5_with_extra(extra: dict[str, object]) -> dict[str, object]:
    data = json.loads((DATA / "run_v5" / "run.json").read_text())
    data["cases"][0]["steps"][0]["extra"] = extra
    return data


def test_a_run_5_handshakes_step_has_its_handshake_times_as_one_record() -> None:
    extra = {"handshakes": 40, "handshake_ms_p50": 1.5, "handshake_ms_max": 9.0}
    step = run_from_dict(_run_5_with_extra(extra)).cases[0].steps[0]
    assert step.figures.handshakes == 40
    assert step.figures.handshake_ms is not None
    assert (step.figures.handshake_ms["p50"], step.figures.handshake_ms["max"]) == (1.5, 9.0)
    assert step.figures.handshake_ms["p99.9"] is None


def test_a_run_5_extra_key_no_harness_wrote_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown step figures \['sparkle'\]"):
        run_from_dict(_run_5_with_extra({"open": 3, "sparkle": 1}))


def test_docs_results_md_has_the_figures_table_the_record_writes() -> None:
    docs = (ROOT / "docs" / "results.md").read_text()
    assert figures_reference_markdown() in docs, (
        "docs/results.md's step figures table is not model.step_figures."
        "figures_reference_markdown(): paste its output there"
    )
    assert len(FIGURE_NAMES) == len(set(FIGURE_NAMES))


# what a read of the old free dict looks like: `.extra[`, `.extra.get(`, `"extra"`
EXTRA_READ = re.compile(r"""\.extra\[|\.extra\.get\(|["']extra["']""")


def test_no_package_reads_a_step_s_figures_by_a_string_key() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if EXTRA_READ.search(line)
    ]
    assert not found, "read a step's figures by field (step.figures.X), not extra:\n" + "\n".join(
        found
    )

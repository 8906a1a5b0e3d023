"""A run's folder a person can read: one folder per case with its ramp
and rounds inside, FILES.md saying what each file is, and runs of the old layout (each
pass a sibling folder) still found by `ramp_dir`."""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.history import list_history
from harness.run.outputs import case_folder, files_index, ramp_dir, write_files_index
from model.results import read_run
from tests.helpers import DATA_DIR, synthetic_case, synthetic_run


def test_each_pass_of_a_case_lies_in_the_cases_folder(tmp_path: Path) -> None:
    key = "aiohttp_text_empty_wrk_single_both"
    assert case_folder(tmp_path, key) == tmp_path / key / "ramp"
    assert case_folder(tmp_path, key, repeat=1, repeats=3) == tmp_path / key / "ramp-r2"
    assert case_folder(tmp_path, key, round_label="round 2 of 5") == (
        tmp_path / key / "round-2-of-5"
    )


def test_files_md_names_every_file_and_each_cases_passes(tmp_path: Path) -> None:
    run = synthetic_run(
        "20261201-100000.000-quick",
        [
            synthetic_case("aiohttp", [1000.0, 1010.0]),
            synthetic_case("gevent", [], status="failed"),
        ],
    )
    for case in run.cases[:1]:
        for name in ("ramp", "round-1-of-2", "round-2-of-2"):
            (tmp_path / case.key / name).mkdir(parents=True)
    write_files_index(run, tmp_path)
    text = (tmp_path / "FILES.md").read_text()
    assert text == files_index(
        run, {run.cases[0].key: ["ramp", "round-1-of-2", "round-2-of-2"], run.cases[1].key: []}
    )
    for path in ("`run.json`", "`steps.csv`", "`report.html`", "`charts/*.png`", "`monitor.csv`"):
        assert path in text
    assert "| `aiohttp_text_empty_wrk_single_both/` | ok | `ramp/`, `round-1-of-2/`" in text
    assert "| `gevent_text_empty_wrk_single_both/` | failed (gevent would not start) | none" in text


def test_a_run_of_the_old_layout_still_opens(tmp_path: Path) -> None:
    """tests/data/run_v3 keeps each case's ramp as `<key>/` itself: its files are found,
    and history reads it as any other."""
    run_dir = tmp_path / "results" / "20261201-041442.429-smoke"
    shutil.copytree(DATA_DIR / "run_v3", run_dir)
    run = read_run(run_dir)
    for case in run.cases:
        assert ramp_dir(run_dir, case) == run_dir / case.key
        assert (ramp_dir(run_dir, case) / "monitor.csv").is_file()
    [entry] = list_history(tmp_path / "results")
    assert entry.problem is None and entry.frameworks == ["aiohttp", "nginx"]

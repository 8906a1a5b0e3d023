"""What `harness doctor --install` says before and while it installs (harness.install_plan),
without installing anything: the plan from what is missing, the lines for what is here,
cargo's progress summarised."""

from __future__ import annotations

import sys

from harness.doctor import _run_with_progress
from harness.install_plan import CargoProgress, install_plan, plan_lines, step_done
from harness.tools import TOOLS, ToolStatus


def test_the_plan_says_what_it_installs_why_and_how_long() -> None:
    missing = [TOOLS["h2load"], TOOLS["oha"], TOOLS["nginx"]]
    steps = install_plan(
        missing, node_modules_missing=True, ferretdb_missing=False, w0_probe_missing=False
    )
    assert [step.kind for step in steps] == ["apt", "cargo", "npm"]
    apt, cargo, npm = steps
    assert apt.what == "apt-get install nghttp2-client nginx"
    assert (
        apt.why == "h2load: the h2load driver; nginx: the nginx baseline and the lb: process models"
    )
    crate, version = TOOLS["oha"].crate or ("", "")
    assert cargo.what == f"cargo install {crate} --version {version}"
    assert (cargo.tool, cargo.estimate) == ("oha", "about 4 minutes on 2 cores")
    assert npm.what == "npm ci in servers/baselines/node"
    lines = plan_lines(steps, [])
    assert lines[0] == "to install, 3 steps:"
    assert lines[2].startswith(f"  2. cargo install {crate} --version {version} (about 4 minutes")


def test_a_tool_already_here_is_one_line_and_nothing_missing_says_so() -> None:
    present = [
        ToolStatus("wrk", "wrk", "/usr/bin/wrk", "4.1.0"),
        ToolStatus("oha", "x", None, None),
    ]
    assert plan_lines([], present) == ["have wrk 4.1.0 (/usr/bin/wrk)", "nothing to install"]
    everything = install_plan(
        [], node_modules_missing=False, ferretdb_missing=True, w0_probe_missing=True
    )
    assert [step.kind for step in everything] == ["go", "probe"]
    assert step_done(1, 2, everything[0], 93.4) == "[1/2] go build FerretDB: done in 93 s"


def test_cargo_progress_is_a_line_every_few_seconds_not_one_per_crate() -> None:
    progress = CargoProgress(started_s=100.0, every_s=15.0)
    said = [
        progress.feed("    Updating crates.io index", 101.0),
        progress.feed("   Compiling libc v0.2.170", 105.0),
        progress.feed("   Compiling tokio v1.44.0", 116.0),  # 16 s since the start
        progress.feed("   Compiling hyper v1.6.0", 120.0),  # 4 s since the last line
        progress.feed("   Compiling oha v1.16.0", 131.5),  # 15.5 s since it
    ]
    assert said == [
        None,
        None,
        "  cargo: 2 crates compiled, 16 s (latest tokio v1.44.0)",
        None,
        "  cargo: 4 crates compiled, 32 s (latest oha v1.16.0)",
    ]


def test_a_builds_output_is_read_as_it_comes_and_its_tail_kept() -> None:
    """A real process standing in for cargo: its lines reach the progress, its exit
    status and last lines come back for the error a failed build quotes."""
    script = "print('   Compiling a v1'); print('   Compiling b v2'); print('error: nope'); exit(3)"
    said: list[str] = []
    returncode, tail = _run_with_progress(
        [sys.executable, "-c", script], CargoProgress(0.0, every_s=0.0), said.append
    )
    assert returncode == 3
    assert tail[-1] == "error: nope\n"
    assert said[-1].startswith("  cargo: 2 crates compiled") and "(latest b v2)" in said[-1]

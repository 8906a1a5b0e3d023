"""`harness doctor --install --dry-run` as a user runs it: what is here, one line a tool,
and what would be installed with why and how long — nothing installed."""

from __future__ import annotations

from tests.helpers import harness, require_tools


def test_the_install_plan_names_each_tool_already_here_and_installs_nothing() -> None:
    require_tools("wrk")
    done = harness("doctor", "--install", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("have wrk ") and "wrk)" in line for line in lines), lines
    assert lines[-1] == "nothing to install" or any(
        line.startswith("to install, ") for line in lines
    ), lines
    assert "installed:" not in done.stdout

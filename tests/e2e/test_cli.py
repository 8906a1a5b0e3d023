"""The `harness` console script: listings, one-line errors, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.profile import setting_keys
from servers import BUILTIN, FRAMEWORKS
from tests.helpers import ONE_STEP_SMOKE, harness, require_framework, require_tools


def test_list_names_every_framework_with_versions() -> None:
    result = harness("list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["framework"]: row for row in json.loads(result.stdout)}
    # plugins installed here (the contenders' entry point) add theirs: builtin are ours (this
    # process's registry may hold the plugins too, loaded by an earlier test)
    ours = {name: f for name, f in FRAMEWORKS.items() if f.origin == BUILTIN}
    assert {name for name, row in rows.items() if row["origin"] == "builtin"} == set(ours)
    assert all(row["origin"].startswith("plugin ") for name, row in rows.items()
               if name not in ours)  # fmt: skip
    for name, framework in ours.items():
        row = rows[name]
        assert row["role"] == framework.role
        if row["available"]:
            what = framework.distributions[:1] or framework.programs[:1]
            assert what[0] in row["versions"], row
        else:
            assert row["missing"]
    assert "asyncio" in rows["aiohttp"]["loops"]
    assert rows["nginx"]["role"] == "baseline"
    # stock nginx serves what needs no code: no timer (/delay), no body reader (/upload)
    assert rows["nginx"]["routes"] == [
        "/",
        "/files/",
        "/json",
        "/plaintext",
        "/json-comp",
        "/body/10k",
    ]


def test_list_table_is_printed() -> None:
    result = harness("list")
    assert result.returncode == 0
    for name in FRAMEWORKS:
        assert name in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["verify", "--frameworks", "nope"],
            "unknown framework nope: choose from all, baselines, gevent",
        ),
        (["verify", "--frameworks", "aiohttp", "--sinks", "disk"], "unknown sink disk"),
        (["verify", "--frameworks", "aiohttp", "--sink", "disk"], "unknown sink disk"),
        (["compare", "--frameworks", "aiohttp", "--sinks", "disk"], "unknown sink disk"),
        (["run", "--frameworks", "aiohttp,nginx"], "run takes one framework (--frameworks NAME)"),
        (
            ["run", "--frameworks", "aiohttp", "--server", "mine=mine --port {port}"],
            "run takes one framework: --server mine is not --frameworks aiohttp",
        ),
        (
            ["compare", "--frameworks", "nginx", "--server", "mine=no-such-server {port}"],
            "not installed: mine (missing no-such-server)",
        ),
        (["run", "--framework", "aiohttp", "--set", "repeat=0"], "repeat must be at least 1"),
        (
            ["verify", "--frameworks", "aiohttp", "--server-cpus", "4096"],
            "CPU 4096 is not available",
        ),
        (["bench", "--frameworks", "aiohttp", "--load-cpus", "a-b"], "is not like 0 or 1-3"),
        (
            ["compare", "--frameworks", "aiohttp", "--profile", "latency", "--driver", "wrk"],
            "driver wrk does not run constant-rate ramps (profile latency): use --driver oha",
        ),
        (
            ["compare", "--frameworks", "aiohttp", "--profile", "memcache-http", "--driver", "ab"],
            "driver ab does not check reply bodies, which the memcache-http scenario needs",
        ),
    ],
)
def test_user_mistakes_get_one_line_and_exit_1(args: list[str], message: str) -> None:
    result = harness(*args)
    assert result.returncode == 1
    assert result.stderr.startswith("harness: error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "nonsense=1"], "--set nonsense=1: unknown key nonsense; keys: "),
        (["--set", "ramp.step"], "--set 'ramp.step' is not key=value"),
        (["--set", "repeat=abc"], "--set repeat=abc: repeat takes a whole number"),
        (["--set", "durable=yes"], "--set durable=yes: durable takes true or false"),
    ],
)
@pytest.mark.parametrize("command", [["compare", "--frameworks"], ["run", "--framework"]])
def test_a_set_the_harness_cannot_read_is_a_usage_error_in_one_line(
    command: list[str], args: list[str], message: str
) -> None:
    result = harness(*command, "aiohttp", "--profile", "smoke", *args)
    assert result.returncode == 2, result.stdout + result.stderr  # as typer's own
    assert result.stderr.startswith(f"harness: error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1
    if "unknown key" in message:  # every key there is, named
        assert result.stderr.strip().endswith(", ".join(setting_keys()))
        assert "sink, " in result.stderr and "ramp.stop, " in result.stderr


def test_run_and_compare_take_the_same_options() -> None:
    """run is compare for one framework: one set of options, declared once."""
    compare, run = harness("compare", "--help"), harness("run", "--help")
    assert compare.returncode == run.returncode == 0, compare.stderr + run.stderr
    options = [text.stdout.split("Options:")[1] for text in (compare, run)]
    assert options[0] == options[1]
    assert "--results DIR" in options[0] and "--sink, --sinks" in options[0]
    for hidden in ("--out ", "--agent-cpus", "--framework "):  # old names: accepted, not shown
        assert hidden not in options[0]


def test_set_scenario_and_sink_are_measured(tmp_path: Path) -> None:
    """`--set` reaches the run when no named option is given: the file sink measured."""
    require_framework("aiohttp")
    require_tools("wrk")
    result = harness(
        "compare", "--frameworks", "aiohttp", "--profile", "smoke", *ONE_STEP_SMOKE,
        "--set", "scenario=log", "--set", "sink=file", "--no-verify",
        "--results", str(tmp_path), timeout_s=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    [run_json] = tmp_path.glob("*/run.json")
    data = json.loads(run_json.read_text())
    assert (data["config"]["profile"]["scenario"], data["config"]["profile"]["sink"]) == (
        "log",
        "file",
    )
    [case] = data["cases"]
    assert (case["status"], case["scenario"], case["sink"]) == ("ok", "log", "file")
    assert case["summary"]["sink_store"]["sink"] == "file"
    assert case["reconcile"]["lost"] == 0 and case["reconcile"]["sent"] > 0


def test_unknown_command_is_a_usage_error() -> None:
    result = harness("frobnicate")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_doctor_reports_tools_and_limits() -> None:
    result = harness("doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"wrk", "httperf", "ab", "siege", "nginx", "memcached", "taskset"} <= set(
        report["tools"]
    )
    taskset = report["tools"]["taskset"]
    assert taskset["path"] and taskset["version"]
    host = report["host"]
    assert host["nofile_soft"] > 0
    assert host["somaxconn"] > 0
    assert len(host["port_range"]) == 2
    assert host["cores"] >= 1


def test_verify_json_passes_for_a_framework() -> None:
    result = harness("verify", "--frameworks", "aiohttp", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    [verification] = json.loads(result.stdout)
    assert verification["ok"] is True
    assert all(check["ok"] for check in verification["checks"])


def test_help_keeps_square_brackets() -> None:
    # rich markup read 'aiohttp[h1-tls]' and '[servers]' as style tags and dropped them
    result = harness("compare", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "'aiohttp[h1-tls]: peak >= 10000'" in text
    assert "whose [servers] table" in text

"""The CI outputs (harness.outputs): JUnit XML read back by junitparser as a CI system
reads it, and Markdown whose tables hold together, for runs, diffs and verifies made
of model objects. The commands' own files are checked end to end in
tests/e2e/test_ci_outputs.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import junitparser
import pytest

from charts.report import render_html
from charts.tables import CLOSING, MEMORY
from harness.diff import diff_runs
from harness.outputs import write_output
from harness.outputs.junit import JUnitTest, diff_junit, run_junit, verify_junit
from harness.outputs.markdown import cell, diff_markdown, run_markdown, table, verify_markdown
from harness.verify import Check, Verification
from model.errors import UserError
from model.thresholds import judge_thresholds, parse_threshold
from tests.helpers import synthetic_case, synthetic_run

BASE = [10000.0, 10150.0, 9900.0, 10050.0, 9950.0]


def gated_run() -> object:
    """aiohttp measured in five rounds, gevent failed: one threshold holds, one fails,
    one cannot hold (gevent failed)."""
    cases = [synthetic_case("aiohttp", BASE), synthetic_case("gevent", [], status="failed")]
    rules = [parse_threshold(r) for r in ("aiohttp: peak >= 9000", "*: peak >= 10500")]
    run = synthetic_run("20261201-100000.000-quick", cases)
    return dataclasses.replace(run, thresholds=tuple(judge_thresholds(rules, cases)))


def parsed(tmp_path: Path, text: str) -> junitparser.JUnitXml:
    path = write_output(tmp_path / "out" / "junit.xml", text, "--junit")
    return junitparser.JUnitXml.fromfile(str(path))


def test_a_runs_junit_counts_cases_and_thresholds(tmp_path: Path) -> None:
    run = gated_run()
    xml = parsed(tmp_path, run_junit(run))
    suites = {suite.name: suite for suite in xml}
    assert set(suites) == {"cases", "thresholds"}
    assert (suites["cases"].tests, suites["cases"].failures) == (2, 1)
    # aiohttp >= 9000 held; "*: peak >= 10500" failed on aiohttp's interval and on gevent
    assert (suites["thresholds"].tests, suites["thresholds"].failures) == (3, 2)
    failures = {
        case.name: case.result[0]
        for case in suites["thresholds"]
        if case.result and isinstance(case.result[0], junitparser.Failure)
    }
    aiohttp = failures["*: peak >= 10500 [aiohttp_text_empty_wrk_single_both]"]
    # the figure and its interval, in the message a CI page shows
    assert "10,010 [" in aiohttp.message and "interval low end" in aiohttp.message
    gevent_case = next(c for c in suites["cases"] if c.name.startswith("gevent"))
    assert "would not start" in gevent_case.result[0].message
    aiohttp_case = next(c for c in suites["cases"] if c.name.startswith("aiohttp"))
    assert aiohttp_case.is_passed and "peak req/s 10,010 [" in aiohttp_case.system_out


def test_a_diffs_junit_fails_only_what_got_slower(tmp_path: Path) -> None:
    old = synthetic_run(
        "a", [synthetic_case("aiohttp", BASE), synthetic_case("gevent", BASE)], profile="quick"
    )
    new = synthetic_run(
        "b",
        [
            synthetic_case("aiohttp", [v * 0.8 for v in BASE]),
            synthetic_case("gevent", [], status="failed"),
        ],
    )
    result = diff_runs(old, new)
    xml = parsed(tmp_path, diff_junit(result))
    (suite,) = list(xml)
    assert (suite.tests, suite.failures, suite.skipped) == (2, 1, 1)
    slower = next(c for c in suite if c.name == "aiohttp").result[0]
    assert "0.800× [" in slower.message and "slower, beyond 1.1×" in slower.message
    text = diff_markdown(result)
    assert "**Slower beyond 1.1×**: aiohttp" in text


def test_a_verifys_junit_has_a_test_per_check(tmp_path: Path) -> None:
    results = [
        Verification(
            "mine",
            "empty",
            (
                Check("text", True, "200, 26 bytes"),
                Check("malformed", False, "oversized-headers answered 200"),
                Check("counter", True, "not supported (/counter: 404)", supported=False),
            ),
        ),
        Verification("other", "empty", error="did not listen within 10 s"),
    ]
    xml = parsed(tmp_path, verify_junit(results))
    counts = [(s.name, s.tests, s.failures, s.skipped) for s in xml]
    assert counts == [("mine (empty sink)", 3, 1, 1), ("other (empty sink)", 1, 1, 0)]
    text = verify_markdown(results)
    assert text.startswith("## Verify: 0 of 2 passed")
    body = text.splitlines()[4:]
    assert body[0].startswith("| mine | empty | h1 | malformed | **FAIL**")  # failures first


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each table in `text` as rows of cells (a pipe escaped as `\\|` stays in its cell)."""
    tables: list[list[list[str]]] = []
    previous = False
    for line in text.splitlines():
        is_row = line.startswith("| ") and line.endswith(" |")
        if is_row:
            cells = [c.strip() for c in line[2:-2].replace("\\|", "\0").split(" | ")]
            if not previous:
                tables.append([])
            tables[-1].append([c.replace("\0", "|") for c in cells])
        previous = is_row
    return tables


def test_a_runs_markdown_is_a_table_with_intervals_verdict_and_links(tmp_path: Path) -> None:
    sets = [{"text": "aiohttp alone", "ratios": []}]
    run = dataclasses.replace(
        gated_run(), verdict={"text": "aiohttp alone", "sets": sets}, status="complete"
    )
    run_dir = tmp_path / "results" / run.run_id
    (run_dir / "charts").mkdir(parents=True)
    (run_dir / "charts" / "peak.png").write_bytes(b"png")
    (run_dir / "report.html").write_text("<html></html>")
    text = run_markdown(run, run_dir, base=tmp_path)
    summary, _precision, thresholds = markdown_tables(text)
    header, rule, *rows = summary
    assert len({len(row) for row in summary}) == 1  # every row as wide as the header
    assert header[:3] == ["framework", "status", "peak req/s"]
    assert set(rule[2]) == {"-", ":"}  # figures aligned right
    assert rows[0][2].startswith("10,010 [") and rows[1][1] == "**failed**"
    assert rows[1][-1] == "gevent would not start"
    assert "**Verdict (95 % intervals)**\n\n- aiohttp alone\n" in text
    assert "**Thresholds**: 2 of 3 failed" in text and len(thresholds) == 2 + 3
    # links relative to where the Markdown file lies
    assert f"[report](results/{run.run_id}/report.html)" in text
    assert f"[peak](results/{run.run_id}/charts/peak.png)" in text


def test_a_cell_is_one_line_and_keeps_its_pipes() -> None:
    assert cell("a | b\nc") == "a \\| b c"
    rows = markdown_tables(table(["x", "y"], [["1 | 2", "z"]], {0}))
    assert rows == [[["x", "y"], ["---:", "---"], ["1 | 2", "z"]]]


def test_a_test_cannot_fail_and_be_skipped() -> None:
    with pytest.raises(ValueError, match="cannot both fail and be skipped"):
        JUnitTest("c", "n", failure="f", skipped="s")


def test_an_unwritable_output_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"^--junit .*file/x\.xml: cannot write it"):
        write_output(tmp_path / "file" / "x.xml", "<x/>", "--junit")


def test_the_summary_keeps_a_failure_whole() -> None:
    """A verify failure in the printed summary: every word of it, on the line beneath
    the table (its row is cut to stay one line)."""
    from rich.console import Console

    from harness.outputs.console import print_summary

    error = (
        "verify failed: text: GET / answered 500 with b'Internal Server Error', expected "
        "200 with b'I am a stupid HTTP server!' (declare it in the servers file's deviations)"
    )
    failed = dataclasses.replace(synthetic_case("mine", [], status="failed"), error=error)
    run = synthetic_run("r", [synthetic_case("aiohttp", BASE), failed])
    console = Console(width=120, record=True)
    print_summary(console, run)
    printed = " ".join(console.export_text().split())
    words = [w for w in error.split() if len(w) > 3]
    assert all(w in printed for w in words), printed


def test_the_close_storm_table_lists_each_case_with_a_closing_step() -> None:
    closing = {
        "close": "drop",
        "connections": 15000,
        "open_after": 0,
        "close_s": 1.2,
        "tick_max_ms": 84.2,
        "tick_avg_ms": 1.5,
        "gc_collections": 3,
        "gc_pause_ms": 12.0,
        "followed_s": 2.7,
    }
    stormed = synthetic_case("aiohttp", [])
    stormed = dataclasses.replace(
        stormed, summary=dataclasses.replace(stormed.summary, closing=closing)
    )
    run = synthetic_run("r", [stormed, synthetic_case("twisted", [])])
    assert CLOSING.render(run.cases, "bracketed").text_rows() == [
        ["aiohttp", "drop", "15,000", "84.2", "1.5", "1.2", "0", "12 (3)"]
    ]
    markdown = run_markdown(run)
    assert "**Close storm**" in markdown
    assert "| aiohttp | drop | 15,000 | 84.2 | 1.5 | 1.2 | 0 | 12 (3) |" in markdown
    assert "**Close storm**" not in run_markdown(synthetic_run("r", [synthetic_case("a", [])]))


def test_the_connection_table_gives_the_top_step_the_break_and_memory_per_connection() -> None:
    breakdown = {
        "connections": 1_000_000,
        "host_available_bytes": 3 * 2**30,
        "kb_per_connection": {
            "server_rss": 4.4,
            "server_cgroup": 7.9,
            "agents_rss": 2.6,
            "kernel_slab": 9.3,
            "host": 16.8,
        },
    }
    held = synthetic_case("node-http", [])
    held = dataclasses.replace(
        held, summary=dataclasses.replace(held.summary, memory_breakdown=breakdown)
    )
    broke = synthetic_case("gevent", [])
    broken_at = {"connections": 612_345, "reason": "memory: 1.10 GiB available", "limit": "memory"}
    broke = dataclasses.replace(
        broke,
        summary=dataclasses.replace(
            broke.summary,
            memory_breakdown={"connections": 600_000, "kb_per_connection": {"server_rss": 20.0}},
            breaking_point=broken_at,
        ),
    )
    run = synthetic_run("r", [held, broke, synthetic_case("twisted", [])])
    assert MEMORY.render(run.cases, "bracketed").text_rows() == [
        ["node-http", "1,000,000", "–", "7.9", "2.6", "9.3", "16.8", "3"],
        ["gevent", "600,000", "612,345: memory", "20", "–", "–", "–", "–"],
    ]
    markdown = run_markdown(run)
    assert "**Connections**" in markdown
    assert "| node-http | 1,000,000 | – | 7.9 | 2.6 | 9.3 | 16.8 | 3 |" in markdown
    assert "**Connections**" not in run_markdown(synthetic_run("r", [synthetic_case("a", [])]))
    page = render_html([run], {})
    assert "<h3>Connections</h3>" in page and "612,345: memory" in page
    plain = synthetic_run("r", [synthetic_case("a", [])])
    assert "<h3>Connections</h3>" not in render_html([plain], {})


def test_a_million_reads_as_one_in_every_table(tmp_path: Path) -> None:
    """An offered load of 1,000,000 connections is "1,000,000 conns" in the Markdown
    summary and the report's table, not `:g`'s "1e+06"."""
    case = synthetic_case("node-http", [])
    case = dataclasses.replace(
        case, summary=dataclasses.replace(case.summary, peak_offered=1_000_000)
    )
    run = synthetic_run("20261206-034115.200-ws-ramp", [case])
    text = run_markdown(run, tmp_path, base=tmp_path)
    assert "1,000,000" in text and "e+06" not in text
    html = render_html([run], {})
    assert "1,000,000" in html and "e+06" not in html


def test_the_report_says_the_ramp_as_run() -> None:
    """The profile's description names its default ramp; the report adds the one the run
    used (here `--set ramp.*` on ws-ramp), and a file without it reads as before."""
    ramp = {"kind": "connections", "start": 250000, "target": 1000000, "step": 250000,
            "hold_s": 60, "open_rate_per_s": 450, "mode": "load", "close": "orderly",
            "memory_reserve_gib": None}  # fmt: skip
    run = synthetic_run("20261206-042558.765-ws-ramp", [synthetic_case("twisted", [])])
    ran = dataclasses.replace(run, config={"profile": {"name": "ws-ramp", "ramp": ramp}})
    assert "ramp as run: connections 250,000→1,000,000 step 250,000, opened at 450/s" in (
        render_html([ran], {})
    )
    assert "ramp as run" not in render_html([run], {})

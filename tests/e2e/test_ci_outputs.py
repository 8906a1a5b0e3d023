"""The CI outputs of real commands: `harness compare` with one threshold
that fails writes a JUnit file that junitparser reads with the right counts, and a
Markdown file that a CommonMark renderer (markdown-it, with GitHub's tables) turns into
tables; the exit status stays 3. `harness diff` and `harness verify` write theirs too."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import junitparser
from markdown_it import MarkdownIt

from harness.run.outputs import ramp_dir
from model.results import read_run
from tests.helpers import SHORT_SMOKE, harness, require_framework, require_tools

SHORT = (*SHORT_SMOKE, "--set", "rounds=2", "--set", "round_duration_s=1")


class Tables(HTMLParser):
    """The <table>s of an HTML text, as rows of cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def rendered_tables(markdown: str) -> list[list[list[str]]]:
    parser = Tables()
    parser.feed(MarkdownIt("commonmark").enable("table").render(markdown))
    return parser.tables


def test_a_gated_compare_writes_junit_and_markdown_ci_reads(tmp_path: Path) -> None:
    require_framework("aiohttp")
    require_framework("nginx")
    require_tools("wrk")
    junit, markdown = tmp_path / "ci" / "junit.xml", tmp_path / "ci" / "summary.md"
    done = harness(
        "compare", "--frameworks", "aiohttp,nginx", "--profile", "smoke", *SHORT,
        "--threshold", "*: errors == 0", "--threshold", "aiohttp: peak >= 100000000",
        "--out", str(tmp_path / "results"), "--junit", str(junit), "--markdown", str(markdown),
        timeout_s=170,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr  # a threshold failed: as before
    assert f"junit: {junit}" in done.stdout and f"markdown: {markdown}" in done.stdout

    xml = junitparser.JUnitXml.fromfile(str(junit))
    suites = {suite.name: suite for suite in xml}
    assert (suites["cases"].tests, suites["cases"].failures) == (2, 0)
    # errors == 0 on both cases, and the impossible peak on aiohttp
    assert (suites["thresholds"].tests, suites["thresholds"].failures) == (3, 1)
    (failed,) = [c for c in suites["thresholds"] if not c.is_passed]
    message = failed.result[0].message
    assert message.startswith("aiohttp: peak >= 100000000: ") and "interval low end" in message
    assert " [" in message and "]" in message  # the figure's interval
    root = ET.parse(junit).getroot()  # the schema's element names, read without junitparser
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("5", "1")

    text = markdown.read_text()
    tables = rendered_tables(text)  # the summary, the precision, the thresholds
    summary, thresholds = tables[0], tables[-1]
    assert summary[0][0] == "framework" and "peak req/s" in summary[0]
    assert [row[0] for row in summary[1:]] == ["aiohttp", "nginx (baseline)"]
    peak = summary[0].index("peak req/s")
    assert all(" [" in row[peak] for row in summary[1:])  # each peak with its interval
    assert len(thresholds) == 1 + 3 and [r[-1] for r in thresholds if "FAIL" in r[-1]] == ["FAILED"]
    assert "**Verdict (95 % intervals)**" in text and "[report](../results/" in text
    # the terminal ends on the verdict, the report's sentence
    assert "Verdict (95 % intervals):" in done.stdout

    (run_dir,) = (tmp_path / "results").iterdir()
    # one folder per case, its ramp and its rounds inside
    run = read_run(run_dir)
    folders = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    assert folders == sorted([*(c.key for c in run.cases), "charts"])
    for case in run.cases:
        passes = sorted(p.name for p in (run_dir / case.key).iterdir())
        # round 1 tried at each load where the smoke ramp's two read within 15 %
        trials = case.rounds[0].figures.trials or []
        first = [f"round-1-of-2-trial-at-{load:g}" for load, _ in trials] or ["round-1-of-2"]
        assert passes == sorted(["ramp", *first, "round-2-of-2"]), passes
        assert (run_dir / case.key / "round-2-of-2" / "monitor.csv").is_file()
        assert (ramp_dir(run_dir, case) / "raw" / "step000-0.txt").is_file()
        files = (run_dir / "FILES.md").read_text()
        assert ", ".join(f"`{name}/`" for name in passes) in files
    diff_junit = tmp_path / "diff.xml"
    diffed = harness(
        "diff", str(run_dir), str(run_dir), "--junit", str(diff_junit),
        "--markdown", str(tmp_path / "diff.md"),
    )  # fmt: skip
    assert diffed.returncode == 0, diffed.stdout + diffed.stderr
    (diff_suite,) = list(junitparser.JUnitXml.fromfile(str(diff_junit)))
    assert (diff_suite.tests, diff_suite.failures) == (2, 0)
    assert rendered_tables((tmp_path / "diff.md").read_text())[0][0][0] == "case"


def test_verify_writes_a_test_per_check(tmp_path: Path) -> None:
    require_framework("aiohttp")
    junit = tmp_path / "verify.xml"
    done = harness(
        "verify", "--frameworks", "aiohttp", "--no-backends", "--junit", str(junit),
        "--markdown", str(tmp_path / "verify.md"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (suite,) = list(junitparser.JUnitXml.fromfile(str(junit)))
    assert suite.name == "aiohttp (empty sink)" and suite.failures == 0
    names = {case.name for case in suite}
    assert {"text", "malformed", "sigterm", "telemetry"} <= names
    rows = rendered_tables((tmp_path / "verify.md").read_text())[0]
    assert len(rows) == 1 + suite.tests

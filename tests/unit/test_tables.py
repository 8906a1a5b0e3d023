"""Tables defined once (charts.columns, charts.tables): the one figure-with-interval
formatter, the verdict in words, and one run rendered through every output — console,
report.html, Markdown, JUnit — carrying the same summary columns; the terminal's summary
one line per case at 120 columns."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest
from rich.console import Console

from charts.columns import Column, TableSpec, figure_text, half_width_text
from charts.report import render_html
from charts.tables import SUMMARY, SUMMARY_ALWAYS, VerdictLine, summary_headers, verdict_lines
from harness.outputs.console import print_summary, print_verdict, summary_table
from harness.outputs.junit import run_junit
from harness.outputs.markdown import run_markdown
from harness.run.analysis import with_baseline_ratios
from harness.run.verdict import verdict
from model.results import Run, read_run
from tests.helpers import synthetic_case, synthetic_run

DATA = Path(__file__).parent.parent / "data"


def test_a_figure_with_its_interval_is_compact_in_the_terminal_and_bracketed_in_files() -> None:
    assert figure_text(12304.0, (11912.0, 12695.0), "bracketed") == "12,304 [11,912, 12,695]"
    assert figure_text(12304.0, (11912.0, 12695.0), "compact") == "12,304 ±3 %"
    assert figure_text(1.1, (1.05, 1.15), "compact", spec="{:.2f}", suffix="×") == "1.10× ±5 %"
    assert figure_text(1.1, (1.05, 1.15), spec="{:.2f}", suffix="×") == "1.10× [1.05, 1.15]"
    assert figure_text(None, (1.0, 2.0)) == "–"
    assert figure_text(3.72) == "3.72" and figure_text(25752.4) == "25,752"
    assert half_width_text(1000.0, 998.0, 1002.0) == "±0.2 %"
    assert half_width_text(0.0, -1.0, 1.0) == "±?"


def _ratio(a: str, b: str, ratio: float, ci: list[float], separated: bool) -> dict[str, object]:
    return {"a": a, "b": b, "ratio": ratio, "ci": ci, "separated": separated}


def test_the_verdict_in_words_gives_the_sentence_ties_and_each_ratio() -> None:
    one_set = {
        "scenario": "text",
        "driver": "wrk",
        "text": "nginx > eventmachine ≈ node-http (nginx/eventmachine 1.52× [1.40, 1.66])",
        "ratios": [
            _ratio("nginx", "eventmachine", 1.52, [1.40, 1.66], True),
            _ratio("eventmachine", "node-http", 1.02, [0.97, 1.08], False),
            {"a": "node-http", "b": "x", "ratio": None, "ci": None, "separated": False},
        ],
    }
    (line,) = verdict_lines({"sets": [one_set], "text": one_set["text"]})
    assert line == VerdictLine(
        "",
        one_set["text"],
        (
            "nginx / eventmachine = 1.52× [1.40, 1.66]",
            "eventmachine / node-http = 1.02× [0.97, 1.08] (a tie)",
        ),
    )
    assert line.text().startswith("nginx > eventmachine ≈ node-http (") and "(a tie)" in line.text()
    other = {**one_set, "scenario": "json", "ratios": []}
    lines = verdict_lines({"sets": [one_set, other]})
    assert [entry.where for entry in lines] == ["text, wrk", "json, wrk"]
    assert verdict_lines(None) == [] and verdict_lines({"sets": []}) == []


def every_column_run() -> Run:
    """aiohttp and twisted tied over five rounds, nginx the baseline, gevent failed,
    with flags and a CPU cost: every optional summary column but the protocol ones."""
    cases = with_baseline_ratios(
        [
            synthetic_case("aiohttp", [10000.0, 10150.0, 9900.0, 10050.0, 9950.0]),
            synthetic_case("twisted", [10020.0, 10100.0, 9950.0, 10000.0, 9990.0]),
            synthetic_case("nginx", [80000.0, 81000.0, 79000.0, 80500.0, 79500.0]),
            synthetic_case("gevent", [], status="failed"),
        ],
        {"nginx": "baseline"},
    )
    first = cases[0]
    costly = dataclasses.replace(
        first.summary,
        cpu_us_per_req=95.0,
        cpu_us_per_req_ci=(90.0, 101.0),
        rss_max_bytes=41_200_000,
        flags=("cpu_contended",),
    )
    cases[0] = dataclasses.replace(first, summary=costly)
    run = synthetic_run("20261207-010000.000-quick", cases)
    return dataclasses.replace(run, verdict=verdict(cases))


def _junit_properties(text: str) -> list[set[str]]:
    """Each test case's property names in a JUnit document."""
    root = ET.fromstring(text)
    return [{p.get("name") for p in case.iter("property")} for case in root.iter("testcase")]


# every schema's captured run, read through the upgraders, renders as one written today
CAPTURED = ("run_v1", "run_v1_ws", "run_v2", "run_v3", "run_v4", "run_v5")


@pytest.mark.parametrize(
    "run",
    [every_column_run(), *(read_run(DATA / name) for name in CAPTURED)],
    ids=["built", *CAPTURED],
)
def test_one_run_through_every_output_carries_the_same_summary_columns(
    run: Run, tmp_path: Path
) -> None:
    headers = summary_headers(run.cases)
    assert all(any(h.startswith(always) for h in headers) for always in SUMMARY_ALWAYS)
    # the console: the table's columns are the summary's, each header's words printed
    table = summary_table(run)
    assert [str(c.header).replace("\n", " ") for c in table.columns] == headers
    console = Console(width=120, record=True)
    print_summary(console, run)
    printed = console.export_text()
    assert all(word in printed for header in headers for word in header.split())
    # report.html: the summary table's header row
    html = render_html([run], {})
    summary = html[html.index("<h3>Summary</h3>") :]
    row = summary[: summary.index("</tr>")]
    assert row.count("<th>") == len(headers)
    assert all(f"<th>{escape(header)}</th>" in row for header in headers)
    # Markdown: the first table's header
    markdown = run_markdown(run, tmp_path, base=tmp_path)
    first = next(line for line in markdown.splitlines() if line.startswith("| "))
    assert first == "| " + " | ".join(headers) + " |"
    # JUnit: every case carries each column as a property
    for names in _junit_properties(run_junit(run))[: len(run.cases)]:
        assert set(headers) <= names


def test_the_built_run_has_the_optional_columns_and_both_interval_styles() -> None:
    run = every_column_run()
    headers = summary_headers(run.cases)
    for header in ("status", "vs nginx", "CPU µs/req", "flags", "reason"):
        assert header in headers
    compact = SUMMARY.render(run.cases, "compact").text_rows()[0]
    bracketed = SUMMARY.render(run.cases, "bracketed").text_rows()[0]
    peak = headers.index("peak req/s")  # every case peaks in req/s: said once, above
    assert compact[peak].startswith("10,010 ±") and compact[peak].endswith(" %")
    assert bracketed[peak].startswith("10,010 [")


def test_the_terminal_prints_the_verdict_sentence_the_report_gives() -> None:
    run = every_column_run()
    (line,) = verdict_lines(run.verdict)
    console = Console(width=120, record=True)
    print_verdict(console, run)
    printed = console.export_text()
    assert printed.startswith("Verdict (95 % intervals):")
    assert line.sentence in printed and "(a tie)" in printed
    html = render_html([run], {})
    assert escape(line.sentence) in html
    assert line.sentence in run_markdown(run)


SERVERS = ["gevent", "eventlet", "tornado", "twisted", "aiohttp", "nginx", "node-http",
           "node-express", "eventmachine", "gunicorn-gevent", "hypercorn", "uvicorn-uvloop",
           "granian-rsgi"]  # fmt: skip


def test_a_thirteen_server_summary_is_one_line_per_case_at_120_columns() -> None:
    """A quick compare of 13 servers written to a log: each case one line, the failure's
    reason cut in the table and whole beneath it."""
    cases = []
    for index, name in enumerate(SERVERS):
        rounds = [10000.0 + 731 * index + d for d in (0.0, 180.0, -150.0, 90.0, -60.0)]
        case = synthetic_case(name, rounds)
        summary = dataclasses.replace(
            case.summary,
            cpu_us_per_req=120.5 + index,
            cpu_us_per_req_ci=(110.0 + index, 131.0 + index),
            rss_max_bytes=52_000_000 + index,
            flags=("cpu_contended", "driver_bound", "noisy")[: index % 4],
        )
        cases.append(dataclasses.replace(case, summary=summary))
    error = "verify failed: text: GET / answered 500 with b'Internal Server Error', " * 2
    failed = dataclasses.replace(synthetic_case("mine", [], status="failed"), error=error)
    cases = with_baseline_ratios([*cases, failed], {"nginx": "baseline"})
    run = synthetic_run("20261207-010000.000-quick", cases)
    console = Console(width=120, record=True)
    print_summary(console, run)
    lines = [line.rstrip() for line in console.export_text().splitlines()]
    assert max(len(line) for line in lines[: lines.index("* baseline") + 1]) <= 120
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    body = lines[rule + 1 : lines.index("* baseline")]
    assert len(body) == len(cases)  # no row wrapped onto a second line
    names = [line.split()[0].rstrip("*") for line in body]
    assert names == [case.framework for case in cases]
    assert all("±" in line for line in body[:-1])  # intervals, compact
    beneath = " ".join(lines[lines.index("* baseline") + 1 :])
    assert " ".join(f"mine: {error}".split()) in " ".join(beneath.split())
    # the flags the table cut, whole beneath it, each once with its cases
    assert "flag driver_bound (tornado, twisted, node-http, " in beneath


def test_a_unit_every_row_shares_is_said_once_in_the_header() -> None:
    """Rows of any kind: a shared unit goes to the header, mixed units stay in the
    cells; a column is shown only when its rule says so; no rows, no table."""
    spec = TableSpec[tuple[str, float, str]](
        title="t",
        columns=(
            Column("name", value=lambda r: r[0]),
            Column("peak", value=lambda r: r[1], format=lambda v, s: figure_text(v),
                   unit=lambda r: r[2], numeric=True),
            Column("never", value=lambda r: r[0], shown=lambda rows: False),
        ),
    )  # fmt: skip
    same = spec.render([("a", 12304.0, "req/s"), ("b", 3.5, "req/s")], "compact")
    assert same.headers == ("name", "peak req/s") and same.text_rows()[0] == ["a", "12,304"]
    assert same.numeric_indexes() == {1}
    mixed = spec.render([("a", 12304.0, "req/s"), ("b", 100.0, "conns")], "bracketed")
    assert mixed.headers == ("name", "peak") and mixed.text_rows()[1] == ["b", "100 conns"]
    assert not spec.render([], "compact")

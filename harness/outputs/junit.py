"""JUnit XML (`--junit FILE`): what CI systems read as test results.

The schema's elements only (`testsuites` → `testsuite` → `testcase` with `failure`,
`skipped`, `properties`, `system-out`), so Jenkins, GitLab, GitHub's test reporters and
`junitparser` read it alike:

- a compare or run: a suite `cases` (each case a test carrying the summary's columns,
  charts.tables.SUMMARY, as properties: a failed case fails with its error, a skipped
  one is skipped, an ok one passes with its summary row in `system-out`), the verdict in
  words among the suite's properties, and a suite `thresholds` (each judgement a test:
  a failed rule fails with the figure, its interval and what was compared);
- a diff: a suite `diff` (each case's verdict a test: slower beyond the factor fails
  with the ratio and its interval; not comparable is skipped);
- a verify: a suite per framework, sink and protocol (each check a test; a server that would not
  start fails a test `start`; a route it does not serve is skipped).

Pure functions from the model to text; `write_output` (harness.outputs) writes it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from charts.columns import figure_text
from charts.tables import SUMMARY, verdict_lines
from harness.outputs.text import case_label, change_text
from model.figures import figure
from model.results import Run
from servers.contract import PROTOCOL_H1

if TYPE_CHECKING:
    from harness.diff import RunDiff
    from harness.verify import Verification


@dataclass(frozen=True)
class JUnitTest:
    """One JUnit test: passed unless `failure` (its message) or `skipped` (why) is set."""

    classname: str
    name: str
    failure: str | None = None
    failure_type: str = "failure"
    skipped: str | None = None
    output: str = ""  # system-out: the figures behind a pass
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.failure is not None and self.skipped is not None:
            raise ValueError(f"test {self.name!r} cannot both fail and be skipped")


def _suite(name: str, tests: Sequence[JUnitTest], properties: Iterable[tuple[str, str]] = ()):
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(len(tests)),
        failures=str(sum(t.failure is not None for t in tests)),
        errors="0",
        skipped=str(sum(t.skipped is not None for t in tests)),
        time="0",
    )
    props = list(properties)
    if props:
        holder = ET.SubElement(suite, "properties")
        for key, value in props:
            ET.SubElement(holder, "property", name=key, value=value)
    for test in tests:
        element = ET.SubElement(suite, "testcase", classname=test.classname, name=test.name)
        element.set("time", "0")
        if test.properties:
            holder = ET.SubElement(element, "properties")
            for key, value in test.properties:
                ET.SubElement(holder, "property", name=key, value=value)
        if test.failure is not None:
            failure = ET.SubElement(element, "failure", message=test.failure)
            failure.set("type", test.failure_type)
            failure.text = test.failure
        if test.skipped is not None:
            ET.SubElement(element, "skipped", message=test.skipped)
        if test.output:
            ET.SubElement(element, "system-out").text = test.output
    return suite


def _document(name: str, suites: Sequence[ET.Element]) -> str:
    root = ET.Element("testsuites", name=name)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in suites)))
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def run_tests(run: Run) -> tuple[list[JUnitTest], list[JUnitTest]]:
    """The run's cases and its threshold judgements as tests (in that order)."""
    cases = []
    summary = SUMMARY.render(run.cases, "bracketed")  # a row per case, in their order
    for case, row in zip(run.cases, summary.cells, strict=True):
        classname = f"{run.run_id}.cases"
        name = case_label(case)
        # the summary's columns, as every output shows them: a property each
        columns = tuple(
            (header, cell.joined) for header, cell in zip(summary.headers, row, strict=True)
        )
        props = (
            ("key", case.key),
            ("status", case.status_text),
            *((header, text) for header, text in columns if header != "status"),
        )
        if case.status == "failed":
            cases.append(
                JUnitTest(
                    classname,
                    name,
                    failure=f"{name}: {case.error}",
                    failure_type="case failed",
                    properties=props,
                )
            )
        elif case.status == "skipped":
            cases.append(
                JUnitTest(classname, name, skipped=case.error or "skipped", properties=props)
            )
        else:
            # the summary row in words: what a CI page shows of a passed test
            output = "; ".join(f"{header} {text}" for header, text in columns if text)
            for deviation in case.deviations:
                kind = "warning" if deviation.get("declared") is None else "declared deviation"
                output += (
                    f"\n{kind}: {deviation.get('check')} {deviation.get('key')}: came "
                    f"{deviation.get('came')}; expected {deviation.get('expected')}"
                )
            if case.warnings:
                props = (*props, ("warnings", str(case.warnings)))
            cases.append(JUnitTest(classname, name, output=output, properties=props))
    thresholds = []
    for result in run.thresholds:
        name = f"{result.rule} [{result.case}]"
        measured = figure_text(result.value, result.interval)
        said = f"{result.rule}: {measured}, judged on {result.judged_on}"
        thresholds.append(
            JUnitTest(
                f"{run.run_id}.thresholds",
                name,
                failure=None if result.held else said,
                failure_type="threshold failed",
                output=said if result.held else "",
            )
        )
    return cases, thresholds


def run_junit(run: Run, command: str = "compare") -> str:
    """A compare's (or a run's) JUnit document: the suites `cases` and `thresholds`."""
    cases, thresholds = run_tests(run)
    properties = [
        ("run_id", run.run_id),
        ("status", run.status),
        ("host", str(run.host.get("hostname", ""))),
    ]
    verdict = verdict_lines(run.verdict)
    if verdict:
        properties.append(("verdict", " | ".join(line.text() for line in verdict)))
    suites = [_suite("cases", cases, properties)]
    if thresholds:
        suites.append(_suite("thresholds", thresholds))
    return _document(f"harness {command} {run.run_id}", suites)


def diff_tests(result: RunDiff) -> list[JUnitTest]:
    """Each case's verdict as a test: slower beyond the factor fails; not comparable is
    skipped; the rest pass, the ratio with its interval in their output."""
    tests = []
    for case in result.cases:
        said = (
            f"{case.label}: B/A {change_text(case.peak).joined}, "
            f"p {figure(case.peak.p_verdict)} (Holm): {case.verdict}"
            + (f", beyond {result.factor:g}×" if case.beyond_factor else "")
            + (f" ({case.note})" if case.note else "")
        )
        name = case.label
        classname = f"diff.{result.old_id}..{result.new_id}"
        props = (("verdict", case.verdict),)
        if case.worse_beyond_factor:
            tests.append(
                JUnitTest(classname, name, failure=said, failure_type="slower", properties=props)
            )
        elif case.verdict == "not comparable":
            tests.append(JUnitTest(classname, name, skipped=said, properties=props))
        else:
            tests.append(JUnitTest(classname, name, output=said, properties=props))
    return tests


def diff_junit(result: RunDiff) -> str:
    """A diff's JUnit document: one suite `diff`, a test per case in both runs."""
    properties = [("a", result.old_id), ("b", result.new_id), ("factor", f"{result.factor:g}")]
    if result.other_host:
        properties.append(("other_host", "; ".join(result.other_host)))
    suite = _suite("diff", diff_tests(result), properties)
    return _document(f"harness diff {result.old_id} {result.new_id}", [suite])


def verify_junit(results: Sequence[Verification]) -> str:
    """A verify's JUnit document: a suite per framework and sink, a test per check."""
    suites = []
    for verification in results:
        protocol = verification.protocol
        over = "" if protocol == PROTOCOL_H1 else f", {protocol}"
        classname = f"verify.{verification.framework}.{verification.sink}" + (
            "" if protocol == PROTOCOL_H1 else f".{protocol}"
        )
        tests: list[JUnitTest] = []
        if verification.skipped:
            tests.append(JUnitTest(classname, "sink", skipped=verification.skipped))
        if verification.error:
            tests.append(
                JUnitTest(
                    classname,
                    "start",
                    failure=verification.error,
                    failure_type="server did not start",
                )
            )
        for check in verification.checks:
            if not check.supported:
                tests.append(JUnitTest(classname, check.name, skipped=check.detail))
            elif not check.ok:
                tests.append(
                    JUnitTest(
                        classname, check.name, failure=check.detail, failure_type="check failed"
                    )
                )
            else:
                warnings = "".join(
                    f"\nwarning: {d.line(verification.framework)}" for d in check.warnings
                )
                props = (("warnings", str(len(check.warnings))),) if check.warnings else ()
                tests.append(
                    JUnitTest(
                        classname, check.name, output=check.detail + warnings, properties=props
                    )
                )
        suites.append(_suite(f"{verification.framework} ({verification.sink} sink{over})", tests))
    return _document("harness verify", suites)

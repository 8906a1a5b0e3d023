"""Verify's dispatch and its terminal output, without a server: each protocol module's
registry joins the dispatcher's (harness.verify), and `harness verify`'s table marks,
findings and summary line (harness.verify.console) read each outcome as it is."""

from __future__ import annotations

from harness.verify import (
    CHECK_ROUTES,
    H2_PROTOCOLS,
    HTTP_CHECKS,
    NOT_OVER_H2,
    WEBSOCKET_CHECKS,
    Check,
    Deviation,
    Verification,
    checks_for,
)
from harness.verify.console import check_mark, finding_lines, summary_line
from harness.verify.http import HTTP_CHECK_ROUTES, HTTP_NOT_OVER_H2, HTTP_ROUTE_CHECKS
from harness.verify.websocket import WEBSOCKET_CHECK_ROUTES, WEBSOCKET_NOT_OVER_H2
from harness.verify.workloads import NOT_OVER_H2 as WORKLOADS_NOT_OVER_H2
from harness.verify.workloads import WORKLOAD_CHECK_ROUTES, WORKLOAD_CHECKS
from servers import contract

WARNING = Deviation("malformed", "oversized-headers", "a big header", "431", "200 OK")


def test_every_protocol_module_s_checks_have_a_route_and_the_dispatcher_has_them_all() -> None:
    for checks, routes in (
        (HTTP_ROUTE_CHECKS, HTTP_CHECK_ROUTES),
        (WEBSOCKET_CHECKS, WEBSOCKET_CHECK_ROUTES),
        (WORKLOAD_CHECKS, WORKLOAD_CHECK_ROUTES),
    ):
        assert set(checks) == set(routes)
    assert set(CHECK_ROUTES) == set(HTTP_CHECKS) | set(WEBSOCKET_CHECKS)
    excluded = {**HTTP_NOT_OVER_H2, **WEBSOCKET_NOT_OVER_H2, **WORKLOADS_NOT_OVER_H2}
    assert excluded == NOT_OVER_H2 and set(NOT_OVER_H2) <= set(CHECK_ROUTES)


def test_no_check_http_2_has_no_room_for_is_dispatched_over_h2_or_h2c() -> None:
    for protocol in H2_PROTOCOLS:
        assert not set(checks_for("aiohttp", protocol=protocol)) & set(NOT_OVER_H2)
    assert set(NOT_OVER_H2) & set(checks_for("aiohttp", protocol=contract.PROTOCOL_H1))


def test_each_outcome_reads_as_itself_in_the_table_s_ok_column() -> None:
    assert check_mark(Check("text", True, "fine")) == "[green]ok[/]"
    assert check_mark(Check("text", False, "came 500")) == "[red]FAIL[/]"
    assert check_mark(Check("ws-handshake", True, "not supported", supported=False)) == (
        "[dim]not supported[/]"
    )
    warned = Check("malformed", True, "held", deviations=(WARNING,))
    assert check_mark(warned) == "[yellow]ok, 1 warning(s)[/]"


def test_the_findings_name_each_failure_and_warning_and_the_summary_counts_them() -> None:
    failed = Verification("mine", "empty", (Check("text", False, "came [bold]"),))
    warned = Verification("yours", "empty", (Check("malformed", True, "", deviations=(WARNING,)),))
    skipped = Verification("theirs", "empty", skipped="no h2")
    lines = finding_lines([failed, warned, skipped])
    assert lines[0] == "[red]failed:[/] mine: text: came \\[bold]"  # the server's words escaped
    assert lines[1].startswith("[yellow]warning:[/] yours: malformed oversized-headers:")
    assert len(lines) == 2
    assert summary_line([failed, warned, skipped]) == (
        "1 of 2 passed (1 with warnings: --strict-verify fails them), 1 not offered"
    )

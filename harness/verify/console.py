"""`harness verify`'s terminal output: one table row per check, each finding again whole
on one line beneath it (the table wraps it), and the count of servers that passed."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.secrets import redact
from harness.verify.results import Check, Verification


def check_mark(check: Check) -> str:
    """How a check's outcome reads in the table's `ok` column (rich markup)."""
    if not check.supported:
        return "[dim]not supported[/]"
    if check.ok and check.warnings:
        return f"[yellow]ok, {len(check.warnings)} warning(s)[/]"
    return "[green]ok[/]" if check.ok else "[red]FAIL[/]"


def verification_table(results: Sequence[Verification]) -> Table:
    """Every check of every verification, a row each; a skipped server and one that
    could not be started have a row saying so."""
    table = Table("framework", "sink", "protocol", "check", "ok", "detail")
    for result in results:
        row = (result.framework, result.sink, result.protocol)
        if result.skipped:
            table.add_row(*row, "-", "[yellow]skipped[/]", result.skipped)
        if result.error:
            table.add_row(*row, "start", "[red]FAIL[/]", redact(result.error))
        for check in result.checks:
            table.add_row(*row, check.name, check_mark(check), redact(check.detail))
    return table


def finding_lines(results: Sequence[Verification]) -> list[str]:
    """Each failure and each warning whole on one line (rich markup, the server's words
    escaped)."""
    lines = []
    for result in results:
        for check in result.checks:
            if not check.ok:
                said = escape(redact(f"{result.framework}: {check.name}: {check.detail}"))
                lines.append(f"[red]failed:[/] {said}")
        for deviation in result.warnings:
            said = escape(f"{result.framework}: {deviation.line(result.framework)}")
            lines.append(f"[yellow]warning:[/] {said}")
    return lines


def summary_line(results: Sequence[Verification]) -> str:
    """How many verifications passed of those offered, with warnings, and not offered."""
    passed = sum(r.ok for r in results if not r.skipped)
    skipped = sum(bool(r.skipped) for r in results)
    warned = sum(bool(r.ok and r.warnings) for r in results)
    return (
        f"{passed} of {len(results) - skipped} passed"
        + (f" ({warned} with warnings: --strict-verify fails them)" if warned else "")
        + f", {skipped} not offered"
    )


def print_verifications(results: Sequence[Verification], console: Console) -> None:
    """The table, each finding whole beneath it, and the summary line."""
    console.print(verification_table(results))
    for line in finding_lines(results):
        console.print(line, soft_wrap=True)
    console.print(summary_line(results))

"""`harness diff RUN_A RUN_B`: each case's change from run A (the base) to run B, and
whether it is real (harness.diff names the rule); `harness diff RUN --pair A=B`: two
servers of one run, the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from charts.cpu_tables import CPU_MOVES, run_cpu_moves
from harness.cli.options import JUNIT_OPTION, MARKDOWN_OPTION, console, read_run_arg
from harness.outputs.console import rich_table
from harness.outputs.text import diff_table, note_lines
from model.errors import UserError

if TYPE_CHECKING:  # harness.bench_diff (the statistics): loaded only when asked for
    from harness.bench_diff import BenchDiff
    from harness.diff import RunDiff
    from model.bench import BenchRun
    from model.results import Run


def diff(
    run_a: Path,
    run_b: Path | None,
    *,
    factor: float,
    allow_other_host: bool,
    as_json: bool,
    machine_drift: bool = False,
    junit: Path | None = None,
    markdown: Path | None = None,
    pairs: list[str] | None = None,
) -> int:
    """Print the diff of two runs (a table, or JSON), and write it as JUnit XML and
    Markdown where asked; returns the exit status: 1 when a case got significantly slower
    by more than `factor`, else 0. Runs from different hosts are refused (UserError)
    unless `allow_other_host`, and then labelled. `pairs` (`--pair A=B`) compares A's
    cases of one framework with B's of another; without `run_b`, two of run A's."""
    from harness.diff import diff_runs, host_differences, parse_pair

    if not factor >= 1.0:
        raise UserError(f"--factor must be at least 1.0 (a change of 10 % is 1.10), not {factor}")
    benches = [_read_bench(path) for path in (run_a, run_b) if path is not None]
    if any(benches):
        if pairs or junit or markdown:
            raise UserError("--pair, --junit and --markdown diff compare runs, not benches")
        return diff_benches(run_a, run_b, factor=factor, allow_other_host=allow_other_host,
                            as_json=as_json)  # fmt: skip
    try:
        named = [parse_pair(text) for text in pairs or ()]
    except ValueError as error:
        raise UserError(str(error)) from None
    if run_b is None and not named:
        raise UserError("one run given: name the cases to compare in it, --pair A=B")
    old = read_run_arg(run_a)
    new = old if run_b is None else read_run_arg(run_b)
    differences = host_differences(old, new)
    if differences and not allow_other_host:
        raise UserError(
            f"runs {old.run_id} and {new.run_id} were measured on different hosts "
            f"({'; '.join(differences)}): use --allow-other-host to diff them anyway"
        )
    try:
        result = diff_runs(old, new, factor, machine_drift_applied=machine_drift, pairs=named)
    except ValueError as error:  # a pair with no cases
        raise UserError(str(error)) from None
    _write_outputs(result, junit, markdown)
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_run_diff(result, old, new, named, differences)
    return result.exit_status


def _write_outputs(result: RunDiff, junit: Path | None, markdown: Path | None) -> None:
    """The diff as JUnit XML (--junit) and Markdown (--markdown), when asked."""
    if junit is None and markdown is None:
        return
    from harness.outputs import write_output
    from harness.outputs.junit import diff_junit
    from harness.outputs.markdown import diff_markdown

    if junit is not None:
        write_output(junit, diff_junit(result), "--junit")
    if markdown is not None:
        write_output(markdown, diff_markdown(result), "--markdown")


def _print_run_diff(
    result: RunDiff,
    old: Run,
    new: Run,
    named: list[tuple[str, str]],
    differences: list[str],
) -> None:
    """The diff's table (its title names the runs, the pairs, and different hosts and
    limits), the CPU moves, the notes, the machine's drift and the cases in one run only."""
    from harness.diff import RULE

    factor = result.factor
    title = f"diff: A {old.run_id} → B {new.run_id} (factor {factor:g})"
    if named:
        title += f", {', '.join(f'{a} → {b}' for a, b in named)}"
    if differences:
        title += f"\n[yellow]DIFFERENT HOSTS[/]: {'; '.join(differences)}"
    if result.other_limits:
        title += f"\n[yellow]DIFFERENT LIMITS[/]: {'; '.join(result.other_limits)}"
    rendered = diff_table(result).render(result.cases, "compact")
    table = rich_table(rendered, title=title, width=console.width)
    table.caption = f"verdict: {RULE}; p99 (lower is better) for information"
    console.print(table)
    moves = run_cpu_moves(old, new)
    if moves:
        console.print(rich_table(CPU_MOVES.render(moves, "compact"), width=console.width))
    for line in note_lines(result):
        console.print(f"note: {escape(line)}", soft_wrap=True)
    if result.drift is not None:
        console.print(escape(result.drift.text()))
    else:
        console.print(
            "fewer than two baselines in both runs: raw peaks, the machine's drift unknown"
        )
    for side, names in (("A", result.only_in_old), ("B", result.only_in_new)):
        if names:
            console.print(f"only in {side}: {escape(', '.join(names))}")
    if result.worse:
        names = escape(", ".join(c.label for c in result.worse))
        console.print(f"[red]slower beyond {factor:g}×: {names}[/]")


def _read_bench(path: Path) -> BenchRun | None:
    """The bench in `path` (its directory or its run.json), or None when it holds another
    kind of run (or none: read_run_arg says so)."""
    from model.bench import bench_run_from_dict, is_bench_schema
    from model.results import READ_ERRORS

    file = path / "run.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not is_bench_schema(data.get("schema")):
        return None
    try:
        return bench_run_from_dict(data)
    except READ_ERRORS as error:
        raise UserError(f"{file}: {error}") from None


def diff_benches(
    run_a: Path, run_b: Path | None, *, factor: float, allow_other_host: bool, as_json: bool
) -> int:
    """Print the diff of two bench runs: each figure's ratio ours / minimal in A and B and
    the change with its 95 % interval; returns 1 when a figure got significantly worse by
    more than `factor`, else 0."""
    from harness.bench_diff import diff_benches as diff_bench_runs
    from harness.diff import host_differences

    old, new = _read_bench(run_a), _read_bench(run_b) if run_b is not None else None
    if old is None or new is None:
        raise UserError("diff a bench with another bench (harness history says each run's kind)")
    differences = host_differences(old, new)  # type: ignore[arg-type]
    if differences and not allow_other_host:
        raise UserError(
            f"benches {old.run_id} and {new.run_id} were measured on different hosts "
            f"({'; '.join(differences)}): use --allow-other-host to diff them anyway"
        )
    try:
        result = diff_bench_runs(old, new)
    except ValueError as error:
        raise UserError(str(error)) from None
    worse = [
        c.label
        for c in result.changes
        if c.verdict == "worse" and c.ratio_change and not 1 / factor <= c.ratio_change <= factor
    ]
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_bench_diff(result, differences)
        if worse:
            console.print(f"[red]worse beyond {factor:g}×: {escape(', '.join(worse))}[/]")
    return 1 if worse else 0


def _print_bench_diff(result: BenchDiff, differences: list[str]) -> None:
    """The bench diff's table (harness.bench_diff.bench_diff_table) in the terminal."""
    from harness.bench_diff import BENCH_RULE, bench_diff_table

    title = bench_diff_table(result).title
    if differences:
        title += f"\n[yellow]DIFFERENT HOSTS[/]: {'; '.join(differences)}"
    caption = f"ours / minimal: higher is better for req/s, lower for KB and µs; {BENCH_RULE}"
    rendered = bench_diff_table(result).render(result.changes, "bracketed")
    console.print(rich_table(rendered, title=title, caption=caption))
    for side, names in (("A", result.only_in_old), ("B", result.only_in_new)):
        if names:
            console.print(f"only in {side}: {escape(', '.join(names))}")


def diff_command(
    run_a: Path = typer.Argument(..., help="The base run: results/<run-id> or its run.json."),
    run_b: Path | None = typer.Argument(
        None, help="The new run, compared with the base (omitted: run A again, with --pair)."
    ),
    pairs: list[str] = typer.Option(
        None,
        "--pair",
        help="Compare A's case of one framework with B's of another: A=B (e.g. "
        "aiohttp=aiohttp-uvloop); without RUN_B, two servers of one run. Repeatable.",
    ),
    factor: float = typer.Option(
        1.10, help="The change that matters: exit 1 when a case is significantly slower by more."
    ),
    allow_other_host: bool = typer.Option(
        False, "--allow-other-host", help="Diff runs measured on different hosts (labelled)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    junit: Path = JUNIT_OPTION,
    markdown: Path = MARKDOWN_OPTION,
    machine_drift: bool = typer.Option(
        False,
        "--machine-drift/--no-machine-drift",
        help="Judge the frameworks against the machine's drift (the baselines' median B/A; "
        "always reported).",
    ),
) -> None:
    """Each case's peak in run B against run A: the ratio with its 95 % interval and a
    verdict (faster, slower, no significant change); exit 1 when a case is significantly
    slower by more than --factor. Two bench runs: each framework's ratio ours / minimal in
    A and in B, and its change B/A with its 95 % interval."""
    raise typer.Exit(
        diff(
            run_a,
            run_b,
            factor=factor,
            allow_other_host=allow_other_host,
            as_json=as_json,
            junit=junit,
            markdown=markdown,
            machine_drift=machine_drift,
            pairs=pairs,
        )
    )

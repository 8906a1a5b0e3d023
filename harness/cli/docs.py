"""docs/cli.md, written from the command line itself: `python -m harness.cli.docs > docs/cli.md`.

Every command's usage line, help text and the help record click prints for each visible
argument and option under `--help` (hidden aliases left out, as `--help` leaves them), so
the reference cannot drift from the CLI; tests/unit/test_docs.py regenerates it and
compares.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

import typer

# Commands and contexts are typer's own copy of click's classes, used through their methods.
REGENERATE = "python -m harness.cli.docs > docs/cli.md"
_MARKDOWN_SPECIALS = re.compile(r"([\\*_<>\[\]|])")


def escape_cell(text: str) -> str:
    """`text` safe in a Markdown table cell: its `code spans` kept, other specials escaped."""
    text = text.replace("\n", " ")
    if text.count("`") % 2:  # an unpaired backtick opens no span
        text = text.replace("`", "'")
    parts = text.split("`")
    for index, part in enumerate(parts):
        if index % 2:  # inside a code span only a pipe would end the cell
            parts[index] = part.replace("|", "\\|")
        else:
            parts[index] = _MARKDOWN_SPECIALS.sub(r"\\\1", part)
    return "`".join(parts)


def escape_code(text: str) -> str:
    """`text` safe inside a code span of a table cell."""
    return text.replace("|", "\\|")


def _is_group(command: Any) -> bool:
    """Whether `command` has subcommands (typer carries its own click: duck-typed)."""
    return hasattr(command, "list_commands")


def _help_text(command: Any) -> str:
    """The command's help as `--help` prints it: its docstring up to a form feed."""
    text = inspect.cleandoc(command.help or "").split("\f")[0]
    return text.replace("\b\n", "").strip()  # click's no-rewrap marker: not printed


def _section(command: Any, ctx: Any, depth: int) -> list[str]:
    """One command's heading, usage, help and parameter table; a group's subcommands after."""
    lines = [f"{'#' * depth} {ctx.command_path}", "", "```", command.get_usage(ctx), "```", ""]
    lines += [escape_cell(paragraph) for paragraph in _help_text(command).split("\n\n")]
    lines.append("")
    records = [
        record
        for param in command.get_params(ctx)
        if (record := param.get_help_record(ctx)) is not None and record[0] != "--help"
    ]
    if records:
        lines += ["| argument or option | what it does |", "|---|---|"]
        lines += [f"| `{escape_code(names)}` | {escape_cell(what)} |" for names, what in records]
        lines.append("")
    if _is_group(command):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += _section(
                    sub, sub.context_class(sub, info_name=name, parent=ctx), depth + 1
                )
    return lines


def _index(group: Any, ctx: Any) -> list[str]:
    """A table of every command with the first line of its help, linked to its section."""
    rows = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = command.context_class(command, info_name=name, parent=ctx)
        anchor = sub.command_path.replace(" ", "-").lower()
        summary = escape_cell(_help_text(command).split("\n\n")[0])
        rows.append(f"| [{sub.command_path}](#{anchor}) | {summary} |")
        if _is_group(command):
            rows += _index(command, sub)[2:]
    return ["| command | what it does |", "|---|---|", *rows]


def render(app: typer.Typer) -> str:
    """docs/cli.md for `app`: an index of the commands, then one section per command."""
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="harness")
    lines = [
        "# Command reference",
        "",
        f"Generated from the command line itself: `{REGENERATE}`.",
        "Each command's `--help`, unwrapped; `tests/unit/test_docs.py` fails when this file",
        "and the CLI differ. What the commands do and why: [running.md](running.md); the map",
        "of the documentation: [index.md](index.md).",
        "",
        *_index(group, ctx),
        "",
    ]
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            lines += _section(
                command, command.context_class(command, info_name=name, parent=ctx), 2
            )
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    """Print docs/cli.md for the `harness` command line."""
    from harness.cli import app  # the help does not depend on the plugins' frameworks

    sys.stdout.write(render(app))


if __name__ == "__main__":
    main()

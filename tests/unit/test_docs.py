"""The documentation holds together: docs/cli.md is what the CLI generates, and every
relative link in README.md and docs/*.md reaches a file and, with `#anchor`, a heading."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.cli.docs import REGENERATE, escape_cell, render

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).*?\1")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, file:


def test_cli_md_is_what_the_cli_generates() -> None:
    assert CLI_MD.read_text(encoding="utf-8") == render(app), (
        f"docs/cli.md differs from the command line: regenerate it with `{REGENERATE}`"
    )


def test_the_readme_is_a_landing_page() -> None:
    """At most 200 lines, the two commands (main job, tests) on its first screen; the
    reference lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move reference to docs/"
    first = "\n".join(lines[:10])
    assert "nox -s compare" in first and "nox -s tests" in first, first


def test_help_text_is_escaped_for_a_table_cell() -> None:
    assert escape_cell("a|b") == "a\\|b"
    assert escape_cell("results/<run-id> [required]") == "results/\\<run-id\\> \\[required\\]"
    assert escape_cell("sink_path and *: errors") == "sink\\_path and \\*: errors"
    assert escape_cell("see `harness list` | x") == "see `harness list` \\| x"
    assert escape_cell("`a|b`") == "`a\\|b`"  # a pipe ends a cell even inside a code span
    assert escape_cell("an unpaired ` quote") == "an unpaired ' quote"


def _commands() -> list[list[str]]:
    """Every command path under `harness` (["compare"], ["fleet", "up"], ...)."""
    import typer

    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="harness")
    paths: list[list[str]] = []

    def walk(command: object, ctx: object, path: list[str]) -> None:
        for name in command.list_commands(ctx):  # type: ignore[attr-defined]
            sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
            if sub is None or sub.hidden:
                continue
            paths.append([*path, name])
            if hasattr(sub, "list_commands"):
                walk(sub, sub.context_class(sub, info_name=name, parent=ctx), [*path, name])

    walk(group, ctx, [])
    return paths


def _section(command_path: str) -> str:
    """The text of docs/cli.md's section for `harness <command_path>`."""
    text = CLI_MD.read_text(encoding="utf-8")
    start = text.index(f"# harness {command_path}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_cli_md_names_every_option_help_prints(path: list[str]) -> None:
    """Read from `harness ... --help` itself, not from the introspection the generator uses."""
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    printed = set(re.findall(r"^\s{2}(--?[a-z][\w-]*)", result.output, re.MULTILINE))
    printed.discard("--help")
    section = _section(" ".join(path))
    missing = sorted(o for o in printed if not re.search(rf"`{re.escape(o)}\b", section))
    assert not missing, f"docs/cli.md lacks {missing} of `harness {' '.join(path)}`: {REGENERATE}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces
    to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").lower()
    kept = []
    for char in text:
        if char in " -_" or unicodedata.category(char)[0] in "LN":
            kept.append("-" if char == " " else char)
    return "".join(kept)


def anchors(document: Path) -> set[str]:
    """Every heading anchor of `document`, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    in_fence = False
    for line in document.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := HEADING.match(line)):
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(document: Path) -> list[tuple[int, str]]:
    """(line number, target) of each relative link of `document`, outside code."""
    found = []
    in_fence = False
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in LINK.finditer(CODE_SPAN.sub("", line)):
            if not EXTERNAL.match(match.group(1)):
                found.append((number, match.group(1)))
    return found


def test_slugs_read_as_github_writes_them() -> None:
    assert slug("CI outputs: `--junit` and `--markdown`") == "ci-outputs---junit-and---markdown"
    assert slug("WebSocket bench: `harness bench --ws`") == "websocket-bench-harness-bench---ws"
    assert slug("Comparing runs: `harness diff`, `harness history`") == (
        "comparing-runs-harness-diff-harness-history"
    )
    assert slug("harness fleet up") == "harness-fleet-up"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for number, target in links(document):
        file_part, _, anchor = target.partition("#")
        file = (document.parent / file_part).resolve() if file_part else document
        if not file.exists():
            broken.append(f"{document.name}:{number}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{document.name}:{number}: {target}: no heading #{anchor}")
    assert not broken, "\n".join(broken)

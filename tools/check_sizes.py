"""The size check CI runs (`nox -s lint`): no module over MODULE_LIMIT_LINES lines and no
function over FUNCTION_LIMIT_LINES lines in the project's packages.

A function is measured from its `def` (decorators not counted) to its last line, nested
functions each on their own as well as inside the function that holds them. Prints one
line per module and function over its limit and exits 1, or one summary line and exits 0.

    python tools/check_sizes.py             # the packages below
    python tools/check_sizes.py some/dir    # other directories or files

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

MODULE_LIMIT_LINES = 500
FUNCTION_LIMIT_LINES = 80
PACKAGES = ("harness", "servers", "drivers", "charts", "model")
ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRECTORIES = {"node_modules", "__pycache__"}  # vendored JavaScript, bytecode


def python_files(paths: Sequence[Path]) -> Iterator[Path]:
    """Every .py file under `paths` (a file itself when given one), sorted, skipping
    SKIPPED_DIRECTORIES."""
    for path in paths:
        if path.is_file():
            yield path
            continue
        for found in sorted(path.rglob("*.py")):
            if not SKIPPED_DIRECTORIES & set(found.relative_to(path).parts):
                yield found


def oversized(path: Path, shown_as: str) -> list[str]:
    """One line for `path` if it is over MODULE_LIMIT_LINES, then one per function over
    FUNCTION_LIMIT_LINES, in source order; `shown_as` is the name the lines give it."""
    source = path.read_text(encoding="utf-8")
    found = []
    module_lines = len(source.splitlines())
    if module_lines > MODULE_LIMIT_LINES:
        found.append(f"{shown_as}: {module_lines} lines (limit {MODULE_LIMIT_LINES})")
    functions = [
        node
        for node in ast.walk(ast.parse(source, filename=str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    for node in sorted(functions, key=lambda node: node.lineno):
        function_lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if function_lines > FUNCTION_LIMIT_LINES:
            found.append(
                f"{shown_as}:{node.lineno} {node.name}: "
                f"{function_lines} lines (limit {FUNCTION_LIMIT_LINES})"
            )
    return found


def _shown(path: Path) -> str:
    """`path` relative to the working directory when it is under it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: Sequence[str]) -> int:
    """Check the directories or files in `argv` (default: PACKAGES under the repository);
    0 when every one is within the limits, 1 otherwise."""
    paths = [Path(arg) for arg in argv] or [ROOT / package for package in PACKAGES]
    files = list(python_files(paths))
    found = [line for path in files for line in oversized(path, _shown(path))]
    for line in found:
        print(line)
    if found:
        return 1
    print(
        f"sizes: {len(files)} modules within {MODULE_LIMIT_LINES} lines, "
        f"their functions within {FUNCTION_LIMIT_LINES}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The command line answers at once when it will not run: importing it, its help and a
mistaken command line load no plotting or statistics library (scipy, matplotlib: about a
second and a half of CPU), only the commands that draw or compute intervals do.

Each check runs a fresh interpreter with `-X importtime`, so a failure names the chain of
modules that pulled the library in, the module to make lazy first."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

HEAVY = ("scipy", "matplotlib")

# Runs `harness ARGS` as the console script does; at exit (also after sys.exit) prints the
# heavy libraries loaded by then.
MAIN = """
import atexit, sys
HEAVY = {heavy!r}
atexit.register(lambda: print("loaded:", sorted(m for m in HEAVY if m in sys.modules)))
sys.argv = ["harness", *{args!r}]
from harness.cli import main
main()
"""


def import_chain(importtime: str, module: str) -> list[str]:
    """`module` and the modules that imported it, innermost first, from `-X importtime`'s
    report (a module's line follows those of what it imported, indented one step less)."""
    rows = []
    for line in importtime.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        name_column = line.split("|")[2]
        name = name_column.strip()
        if name == "imported package":  # the header line
            continue
        rows.append((len(name_column) - len(name_column.lstrip()), name))
    for index, (depth, name) in enumerate(rows):
        if name == module:
            chain = [name]
            for later_depth, later in rows[index + 1 :]:
                if later_depth < depth:
                    chain.append(later)
                    depth = later_depth
            return chain
    return []


def heavy_loaded(code: str) -> tuple[list[str], str]:
    """The heavy libraries loaded by running `code`, and for each its import chain."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    loaded_lines = [line for line in done.stdout.splitlines() if line.startswith("loaded:")]
    assert loaded_lines, f"no report from the child (status {done.returncode}): {done.stderr}"
    loaded = ast.literal_eval(loaded_lines[-1].removeprefix("loaded:"))
    chains = "; ".join(" <- ".join(import_chain(done.stderr, name)) for name in loaded)
    return loaded, chains


def test_importing_the_cli_loads_no_plotting_or_statistics_library() -> None:
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('loaded:', sorted(m for m in {HEAVY!r} "
        "if m in sys.modules)))\n"
        "import harness.cli\n"
    )
    loaded, chains = heavy_loaded(code)
    assert loaded == [], f"import harness.cli loads {loaded}: {chains}"


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["compare", "--frameworks", "nosuch"],
        ["compare", "--set", "nonsense=1"],
        ["compare", "--no-such-option"],
        ["run", "--frameworks", "nosuch"],
        ["bench", "--help"],
        ["list"],
        ["history", "--help"],
        ["report", "no-such-run"],
        ["verify", "--frameworks", "nosuch"],
        ["bench", "--frameworks", "nosuch"],
    ],
    ids=" ".join,
)
def test_a_command_that_will_not_run_loads_no_plotting_or_statistics_library(
    args: list[str],
) -> None:
    loaded, chains = heavy_loaded(MAIN.format(heavy=HEAVY, args=args))
    assert loaded == [], f"harness {' '.join(args)} loads {loaded}: {chains}"

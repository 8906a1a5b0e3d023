"""Imports point one way: no cycles, a light `drivers.wrk`, a standard-library model.

The layer contracts themselves are import-linter's (pyproject.toml, `nox -s lint`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("model", "servers", "drivers", "harness", "charts")


def cycles(graph: object) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):  # type: ignore[attr-defined]
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):  # type: ignore[attr-defined]
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_import_cycle_between_any_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert cycles(graph) == []


def test_the_model_imports_only_the_standard_library_and_the_contract() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)
    imported = {
        name
        for module in graph.find_children("model") | {"model"}
        for name in graph.find_modules_directly_imported_by(module)
    }
    ours = {name for name in imported if name.split(".")[0] in PACKAGES}
    assert {name for name in ours if not name.startswith("model")} <= {"servers.contract"}
    assert {name for name in imported - ours if name not in sys.stdlib_module_names} == set()


def test_importing_one_driver_loads_no_other_driver_and_nothing_of_the_harness() -> None:
    code = (
        "import sys; import drivers.wrk; "
        f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {PACKAGES!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert set(result.stdout.split()) == {
        "drivers",
        "drivers.base",
        "drivers.histograms",  # latency figures every driver reports: shared
        "drivers.processes",  # how every child is started: shared, like drivers.base
        "drivers.protocol",  # drivers.base's parts: the driver's interface,
        "drivers.result",  # what a driver returns,
        "drivers.watchdog",  # and the step run under a deadline
        "drivers.wrk",
        "model",
        "model.attacks",  # a summary's attack retention record
        "model.errors",
        "model.figures",  # model.ramps writes a ramp's text with the one number formatter
        "model.files",  # model.results writes atomically through it
        "model.ramps",
        "model.results",  # LATENCY_KEYS: the latency record every driver fills
        "model.scenarios",
        "model.step_figures",  # the typed figures a driver fills
        "model.steps",  # model.results' parts: a step,
        "model.summary",  # a case's summary,
        "model.upgrade",  # and the older schemas read
        "servers",
        "servers.contract",
    }

"""The size check CI's lint session runs (tools/check_sizes.py), on small files written
here: a module over its line limit and a function over its own, nested ones included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.check_sizes import FUNCTION_LIMIT_LINES, MODULE_LIMIT_LINES, main


def module_of(lines: int) -> str:
    """A module of exactly `lines` lines."""
    return "".join(f"x{i} = {i}\n" for i in range(lines))


def function_of(lines: int, name: str = "f", indent: str = "") -> str:
    """A function of exactly `lines` lines, `def` line included."""
    body = "".join(f"{indent}    y{i} = {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}() -> None:\n{body}{indent}    return None\n"


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = main([str(tmp_path)])
    return status, capsys.readouterr().out.splitlines()


def test_the_limits_are_the_agreed_ones() -> None:
    assert (MODULE_LIMIT_LINES, FUNCTION_LIMIT_LINES) == (500, 80)


def test_a_module_at_the_limit_passes_with_one_summary_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fits.py").write_text(module_of(500))
    (tmp_path / "short.py").write_text(function_of(80))
    status, out = check(tmp_path, capsys)
    assert status == 0
    assert out == ["sizes: 2 modules within 500 lines, their functions within 80"]


def test_a_module_one_line_over_fails_naming_it_and_its_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fits.py").write_text(module_of(500))
    (tmp_path / "long.py").write_text(module_of(501))
    status, out = check(tmp_path, capsys)
    assert status == 1
    assert out == [f"{tmp_path / 'long.py'}: 501 lines (limit 500)"]


def test_a_nested_function_over_the_limit_is_named_with_its_line_and_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outer = "def outer() -> None:\n" + function_of(81, "inner", indent="    ")
    (tmp_path / "nested.py").write_text("import os\n" + outer)
    status, out = check(tmp_path, capsys)
    assert status == 1
    shown = tmp_path / "nested.py"
    # the function holding it is over the limit too: each is named once
    assert out == [
        f"{shown}:2 outer: 82 lines (limit 80)",
        f"{shown}:3 inner: 81 lines (limit 80)",
    ]


def test_async_functions_and_methods_count_and_vendored_code_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    method = "class Server:\n" + function_of(81, "serve", indent="    ").replace(
        "    def", "    async def", 1
    )
    (tmp_path / "server.py").write_text(method)
    vendored = tmp_path / "node_modules" / "lib"
    vendored.mkdir(parents=True)
    (vendored / "huge.py").write_text(module_of(900))
    status, out = check(tmp_path, capsys)
    assert status == 1
    assert out == [f"{tmp_path / 'server.py'}:2 serve: 81 lines (limit 80)"]

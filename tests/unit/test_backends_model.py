"""The harness side of files, memcached and process models, without a process: the file
set, process-model names, the mcload report and wrk's Lua strings."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from drivers.base import DriverOutputError
from drivers.mcload import parse_mcload
from drivers.wrk import lua_string
from harness.services.fileset import MAX_FILE_BYTES, MIN_FILE_BYTES, ensure_fileset
from harness.topology import parse_process_model, parse_process_models
from model.errors import UserError
from tests.helpers import DATA_DIR


def test_fileset_is_deterministic_mixed_and_reused(tmp_path: Path) -> None:
    first = ensure_fileset(60, 4, tmp_path / "a")
    second = ensure_fileset(60, 4, tmp_path / "b")
    other = ensure_fileset(60, 5, tmp_path / "c")
    assert first.files == second.files  # same seed: same names, sizes and bytes
    assert first.files != other.files
    assert {Path(n).suffix for n in first.names} == {".jpg", ".png", ".gif"}
    for name, size, digest in first.files:
        data = (first.directory / name).read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == digest
        assert MIN_FILE_BYTES <= size <= MAX_FILE_BYTES
    assert (first.directory / first.names[0]).read_bytes()[:2] in (b"\xff\xd8", b"\x89P", b"GI")
    stamp = (first.directory / first.names[0]).stat().st_mtime_ns
    again = ensure_fileset(60, 4, tmp_path / "a")
    assert again.files == first.files
    assert (first.directory / first.names[0]).stat().st_mtime_ns == stamp  # not rewritten


def test_fileset_refuses_an_empty_set(tmp_path: Path) -> None:
    with pytest.raises(UserError):
        ensure_fileset(0, 4, tmp_path / "none")


@pytest.mark.parametrize(
    ("text", "instances", "workers", "balanced"),
    [
        ("single", 1, 1, False),
        ("workers:4", 1, 4, False),
        ("lb:2", 2, 1, True),
        ("lb:2/workers:2", 2, 2, True),
    ],
)
def test_process_models_parse(text: str, instances: int, workers: int, balanced: bool) -> None:
    model = parse_process_model(text)
    assert (model.instances, model.workers, model.balanced) == (instances, workers, balanced)
    assert model.processes == instances * workers


@pytest.mark.parametrize("text", ["", "lb", "lb:0", "workers:x", "cluster", "lb:2/workers:0"])
def test_bad_process_models_are_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="process model"):
        parse_process_models(text) if text else parse_process_model(text)


def test_mcload_report_parses() -> None:
    result = parse_mcload((DATA_DIR / "mcload.txt").read_text())
    assert result.replies == 103616 and result.errors == {"wrong": 2, "reset": 1}
    assert result.errors_total == 3
    assert result.latency_ms["p99"] == pytest.approx(5.271)


def test_mcload_without_report_is_an_output_error() -> None:
    with pytest.raises(DriverOutputError, match="no report"):
        parse_mcload("Traceback (most recent call last):\nOSError: boom\n")


def test_lua_string_escapes_every_byte() -> None:
    assert lua_string(b'a"\n\x00') == '"\\97\\34\\10\\0"'


# -- selection ---------------------------------------------------------------------------

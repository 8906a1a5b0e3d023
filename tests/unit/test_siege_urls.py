"""siege's URL list: written into a private directory, never to a guessable name in /tmp
(the harness runs as root, so a planted file or symlink there was used
as-is or followed and its target overwritten)."""

from __future__ import annotations

import hashlib
import stat
import tempfile
from pathlib import Path

import pytest

from drivers.base import Target
from drivers.siege import SiegeDriver
from model.ramps import RampStep
from model.scenarios import SCENARIOS


def _url_file(command: list[str]) -> Path:
    (option,) = [arg for arg in command if arg.startswith("--file=")]
    return Path(option.removeprefix("--file="))


def test_planted_file_and_symlink_at_the_old_name_are_neither_used_nor_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))  # stands for /tmp
    target = Target("127.0.0.1", 8080, SCENARIOS["text"], paths=("/files/a.jpg", "/files/b.png"))
    text = "\n".join(target.urls()) + "\n"
    old_name = shared_tmp / f"siege-urls-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
    step = RampStep(0, 10, "concurrency", duration_s=1)
    workdir = tmp_path / "raw"
    workdir.mkdir()

    # a planted file: an attacker's URL list
    old_name.write_text("http://attacker.example/\n")
    driver = SiegeDriver()
    (command,) = driver.commands(step, target, workdir)
    used = _url_file(command)
    assert used != old_name
    assert used.read_text() == text
    assert old_name.read_text() == "http://attacker.example/\n"
    assert stat.S_IMODE(used.parent.stat().st_mode) == 0o700
    assert used.parent.parent == shared_tmp  # still short: siege overruns a long --file path

    # a planted symlink to a file the harness (root) must not write
    old_name.unlink()
    victim = tmp_path / "victim"
    old_name.symlink_to(victim)
    other = SiegeDriver()  # (its directory lives as long as the driver)
    (command,) = other.commands(step, target, workdir)
    assert _url_file(command).read_text() == text
    assert not victim.exists()

    # the next step writes its own list afresh in the same private directory
    again = Target("127.0.0.1", 8081, target.scenario, paths=target.paths)
    (command,) = driver.commands(step, again, workdir)
    assert _url_file(command).parent == used.parent
    assert ":8081/" in _url_file(command).read_text()

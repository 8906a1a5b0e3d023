"""oha, the open-loop driver, on real servers: a step keeps its schedule, its histograms
are whole, and a stalled server shows in the latency of every request it held up."""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from pathlib import Path

import pytest

from drivers import histograms as hdr
from drivers.base import Target, run_step
from drivers.oha import OhaDriver, read_requests, request_log_path
from harness import doctor
from harness.server_process import start_server
from harness.tools import TOOLS, tool_path
from model.ramps import RampStep
from model.scenarios import get_scenario
from tests.helpers import require_framework, require_tool

STALL_AFTER_S = 1.5
STALL_S = 1.0


def oha_step(server_port: int, rate: float, duration_s: float, raw_dir: Path, **hooks):  # type: ignore[no-untyped-def]
    target = Target("127.0.0.1", server_port, get_scenario("text"), timeout_s=5.0)
    step = RampStep(0, offered=rate, unit="req/s", duration_s=duration_s)
    return run_step(OhaDriver(connections=50), step, target, None, raw_dir, "step000", **hooks)


def test_a_step_is_sent_on_schedule_and_keeps_both_histograms(tmp_path: Path) -> None:
    require_tool("oha")
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        result = oha_step(server.port, 500, 2.0, tmp_path)
    assert result.errors_total == 0
    assert result.replies == pytest.approx(1000, abs=20)  # 500 req/s for 2 s
    assert abs(result.figures.schedule_error) < 0.02
    assert result.figures.max_in_flight <= 50
    corrected = hdr.decode(result.histograms["latency"])
    uncorrected = hdr.decode(result.histograms["latency_uncorrected"])
    assert corrected.get_total_count() == uncorrected.get_total_count() == result.replies
    for key in ("p50", "p99", "max"):  # from its due time, a request never waited less
        assert result.latency_ms[key] >= result.latency_uncorrected_ms[key]  # type: ignore[index]
    rows = read_requests(request_log_path(RampStep(0, 500, "req/s", 2.0), tmp_path))
    assert len(rows) == result.replies and all(r.intended_s is not None for r in rows)
    assert "$ " in (tmp_path / "step000-0.txt").read_text()  # the raw output is kept


def test_a_paused_server_shows_in_the_corrected_tail(tmp_path: Path) -> None:
    """SIGSTOP for 1 s in the middle of a 4 s step at 1,000 req/s: every request due while
    the server slept waited for it, so p99.9 from the intended send is several hundred ms."""
    require_tool("oha")
    require_framework("aiohttp")
    with start_server("aiohttp") as server:
        group = os.getpgid(server.pid)
        resumed = threading.Event()

        def stall() -> None:
            time.sleep(STALL_AFTER_S)
            try:
                os.killpg(group, signal.SIGSTOP)
                time.sleep(STALL_S)
            finally:
                os.killpg(group, signal.SIGCONT)
                resumed.set()

        stopper = threading.Thread(target=stall, daemon=True)
        try:
            result = oha_step(
                server.port, 1000, 4.0, tmp_path, on_start=lambda _pids: stopper.start()
            )
        finally:
            stopper.join(STALL_AFTER_S + STALL_S + 5)
            if not resumed.is_set():
                os.killpg(group, signal.SIGCONT)
    corrected, uncorrected = result.latency_ms, result.latency_uncorrected_ms
    assert uncorrected is not None
    print(f"stalled step: corrected {corrected}, uncorrected {uncorrected}, {result.figures}")
    assert result.errors_total == 0
    assert corrected["p99.9"] is not None and corrected["p99.9"] >= 300.0
    assert corrected["p99"] is not None and corrected["p99"] >= 300.0
    # the correction is what makes it visible below the tail: ~1,000 of ~4,000 requests
    # were due during the pause, but only the 50 on open connections were sent into it
    assert corrected["p90"] > uncorrected["p90"]  # type: ignore[operator]


def test_doctor_builds_a_cargo_tool_into_the_cache_with_its_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in `cargo` (a real program on PATH) records its arguments and installs a
    binary where --root says: the tool lands in the cache, pinned and --locked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_cargo = bin_dir / "cargo"
    fake_cargo.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/cargo-args\n'
        'while [ $# -gt 0 ]; do [ "$1" = --root ] && root="$2"; shift; done\n'
        'mkdir -p "$root/bin" && printf "#!/bin/sh\\necho oha 1.16.0\\n" > "$root/bin/oha"\n'
        'chmod +x "$root/bin/oha"\n'
    )
    fake_cargo.chmod(fake_cargo.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert tool_path("oha") is None  # nothing in this cache yet
    binary = doctor.install_crate(TOOLS["oha"])
    assert binary == tmp_path / "cache/serverbench-harness/oha-1.16.0/bin/oha"
    assert tool_path("oha") == str(binary)
    args = (tmp_path / "cargo-args").read_text().split()
    assert args[:4] == ["install", "oha", "--version", "1.16.0"] and "--locked" in args
    assert not list((tmp_path / "cache/serverbench-harness").glob("*.partial"))

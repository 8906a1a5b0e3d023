"""How verify weighs an HTTP/2 attack's figures (harness.verify.h2_attacks.judge_attack),
without a socket: a connection ended, or a cost within the limits, holds; otherwise a
failure for our servers and the baselines, a deviation for a server given as a command;
a server that stopped serving fails whoever it is."""

from __future__ import annotations

import dataclasses

import pytest

from harness.verify.failure import CheckFailed
from harness.verify.flood import FloodResult
from harness.verify.h2_attacks import (
    ATTACK_CPU_SHARE,
    ATTACK_RSS_LIMIT_BYTES,
    AttackReport,
    judge_attack,
)
from servers import FRAMEWORKS, Framework

KEY = "h2-ping-flood"
KEPT_OPEN = FloodResult("kept-open", None, 250_000, 4_250_000, 3.0)
ENDED = FloodResult("goaway", 11, 1_000, 17_000, 0.1)
CHEAP = AttackReport(KEPT_OPEN, 4.0, 0.2, 1024, True, 12.0, True, True, "status 200")
BURNING = dataclasses.replace(CHEAP, cpu_s=ATTACK_CPU_SHARE * 4.0 + 0.1)
GROWING = dataclasses.replace(CHEAP, rss_growth_bytes=ATTACK_RSS_LIMIT_BYTES)


@pytest.fixture
def command_server(monkeypatch: pytest.MonkeyPatch) -> str:
    entry = Framework("byo", "", (), ("asyncio",), kind="command", command="byo --port {port}")
    monkeypatch.setitem(FRAMEWORKS, entry.name, entry)
    return entry.name


@pytest.mark.parametrize("report", [CHEAP, dataclasses.replace(BURNING, result=ENDED)])
def test_an_ended_or_cheap_attack_holds_with_its_figures(report: AttackReport) -> None:
    said = judge_attack(KEY, report, "twisted")
    assert not said.deviations and said.figures["served_after"] is True
    assert said.figures["ending"] == report.result.ending


@pytest.mark.parametrize(
    "report", [BURNING, GROWING, dataclasses.replace(CHEAP, served_during=False)]
)
def test_an_unbounded_attack_fails_ours_and_the_baselines(report: AttackReport) -> None:
    for name in ("twisted", "nginx"):
        with pytest.raises(CheckFailed) as failed:
            judge_attack(KEY, report, name)
        assert failed.value.figures["cpu_s"] == report.cpu_s
        assert "; came kept open, seen after writing 250,000 PINGs (3.0 s); server " in str(
            failed.value
        )


def test_an_unbounded_attack_is_a_deviation_for_a_command(command_server: str) -> None:
    said = judge_attack(KEY, BURNING, command_server)
    (deviation,) = said.deviations
    assert deviation.warning and deviation.key == KEY and "s CPU in 4.0 s" in deviation.came
    assert said.detail.endswith(f"; deviating: {KEY}")


def test_a_server_that_stops_serving_fails_even_as_a_command(command_server: str) -> None:
    stopped = dataclasses.replace(CHEAP, served_after=False, after_came="ConnectionRefusedError")
    with pytest.raises(CheckFailed, match="came ConnectionRefusedError"):
        judge_attack(KEY, stopped, command_server)

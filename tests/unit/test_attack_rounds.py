"""The h2-attacks profile's pure parts: its ramp, the round schedule, each attack's
retention from hand-made rounds, the table and the charts drawn from a written run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from charts.attack_figures import attack_p99_figure, attack_peak_figure, attacks_figure
from charts.attack_tables import ATTACKS, attack_rows
from charts.figures import close_all
from charts.render import build_series, render
from harness.outputs.markdown import run_markdown
from harness.profile import load_profile
from harness.run.attack_figures import NO_ATTACK, attack_retention, round_schedule
from harness.verify.h2_attacks import ATTACKS as VERIFY_ATTACKS
from model.attacks import AttackRetention
from model.errors import UserError
from model.ramps import AttackRoundsRamp, ramp_from_dict
from model.results import Case, Run, Step, Summary, read_run, write_run
from model.step_figures import StepFigures
from tests.helpers import synthetic_latency_ms
from tests.unit.test_charts import HOST, make_case


def attack_round(
    attack: str, pair: int, goodput: float, p99: float = 5.0, ending: str | None = None
) -> Step:
    """A round as the case records it: its goodput, p99 and the attack it ran."""
    figures = StepFigures(
        attack=attack,
        round=pair,
        attack_ending=ending if ending else (None if attack == NO_ATTACK else "goaway"),
    )
    return Step(
        offered=500.0,
        unit="req/s",
        achieved=goodput,
        replies=int(goodput * 4),
        errors={"total": 0},
        error_rate=0.0,
        latency_ms=synthetic_latency_ms(p99),
        figures=figures,
    )


def rounds_of(values: dict[str, list[tuple[float, float]]]) -> list[Step]:
    """Rounds in round_schedule's order: per attack, each pair's (without, with) goodput;
    a round without is the one run beside its attack's (before it in even pairs, after
    it in odd ones), p99 4 ms without and 20 ms with."""
    pairs = len(next(iter(values.values())))
    schedule = round_schedule(list(values), pairs)
    recorded = []
    for position, (pair, attack) in enumerate(schedule):
        if attack != NO_ATTACK:
            recorded.append(attack_round(attack, pair, values[attack][pair][1], p99=20.0))
            continue
        _, partner = schedule[position + 1] if pair % 2 == 0 else schedule[position - 1]
        recorded.append(attack_round(NO_ATTACK, pair, values[partner][pair][0], p99=4.0))
    return recorded


def test_the_schedule_pairs_each_attack_with_a_round_without_alternating_the_order() -> None:
    assert round_schedule(["a", "b"], 2) == [
        (0, NO_ATTACK),
        (0, "a"),
        (0, NO_ATTACK),
        (0, "b"),
        (1, "a"),
        (1, NO_ATTACK),
        (1, "b"),
        (1, NO_ATTACK),
    ]


def test_retention_is_the_paired_ratio_with_its_interval_per_attack() -> None:
    steps = rounds_of(
        {
            "h2-ping-flood": [(1000.0, 1000.0), (1000.0, 990.0), (1010.0, 1000.0)],
            "h2-rapid-reset": [(1000.0, 400.0), (980.0, 420.0), (1000.0, 380.0)],
        }
    )
    ping, reset = attack_retention(steps)
    assert (ping.attack, reset.attack) == ("h2-ping-flood", "h2-rapid-reset")
    assert ping.pairs == reset.pairs == 3
    assert ping.retained == pytest.approx(0.9934, abs=1e-3)
    assert reset.retained == pytest.approx(0.4, abs=0.01)
    assert reset.retained_ci is not None and reset.retained_ci[0] < 0.4 < reset.retained_ci[1]
    assert reset.retained_ci[1] < ping.retained_ci[0]  # type: ignore[index]
    assert reset.goodput_without_per_s == pytest.approx(993.3, abs=0.1)
    assert (reset.p99_without_ms, reset.p99_with_ms) == (4.0, 20.0)
    assert reset.p99_ratio == 5.0
    assert reset.endings == "goaway ×3"


def test_a_peak_round_and_an_unpaired_attack_round_are_left_out() -> None:
    peak = attack_round(NO_ATTACK, 0, 2000.0)
    peak = Step(**{**peak.__dict__, "figures": StepFigures()})  # the peak: no attack figure
    steps = [peak, *rounds_of({"h2-ping-flood": [(1000.0, 500.0), (1000.0, 500.0)]})]
    steps.append(attack_round("h2-empty-data", 5, 100.0))  # its round without never ran
    (only,) = attack_retention(steps)
    assert only.attack == "h2-ping-flood" and only.pairs == 2
    assert only.retained == pytest.approx(0.5)


def test_a_round_that_kept_nothing_counts_as_zero_not_as_missing() -> None:
    (starved,) = attack_retention(
        rounds_of({"h2-rapid-reset": [(1000.0, 0.0), (1000.0, 500.0), (1000.0, 400.0)]})
    )
    assert starved.retained == pytest.approx(0.3)  # (0 + 0.5 + 0.4) / 3
    assert starved.retained_ci is not None and starved.retained_ci[0] == 0.0
    assert starved.retained_ci[1] > 0.3


def test_one_pair_has_a_ratio_but_no_interval() -> None:
    (only,) = attack_retention(rounds_of({"h2-ping-flood": [(1000.0, 800.0)]}))
    assert only.retained == pytest.approx(0.8) and only.retained_ci is None


def test_the_ramp_yields_the_peak_round_then_two_rounds_per_pair_and_attack() -> None:
    ramp = AttackRoundsRamp(attacks=("h2-ping-flood", "h2-rapid-reset"), pairs=3)
    steps = list(ramp)
    assert len(steps) == 1 + 2 * 3 * 2
    assert steps[0].unit == "concurrency" and steps[1].unit == "req/s"
    fixed = AttackRoundsRamp(attacks=("h2-ping-flood",), pairs=2, rate_per_s=300)
    assert [s.offered for s in fixed] == [300.0] * 4


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ({"attacks": []}, "attacks must list at least one"),
        ({"attacks": ["a", "a"]}, "each once"),
        ({"attacks": ["a"], "pairs": 1}, "pairs must be at least 2"),
        ({"attacks": ["a"], "load_fraction": 1.5}, "load_fraction"),
        ({"attacks": ["a"], "clients": 7}, "split evenly"),
    ],
)
def test_a_bad_attack_ramp_is_refused_by_name(table: dict, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        ramp_from_dict({"kind": "h2-attacks", **table})


def test_the_shipped_profile_runs_every_attack_of_verify_on_h2c() -> None:
    profile = load_profile("h2-attacks")
    assert profile.protocols == ("h2c",) and profile.driver == "h2load"
    assert isinstance(profile.ramp, AttackRoundsRamp)
    assert set(profile.ramp.attacks) == set(VERIFY_ATTACKS)
    short = load_profile("h2-attacks", {"ramp.attacks": "h2-ping-flood", "protocol": "h2"})
    assert short.ramp.attacks == ("h2-ping-flood",) and short.protocols == ("h2",)  # type: ignore[union-attr]
    with pytest.raises(UserError, match="pairs"):
        load_profile("h2-attacks", {"ramp.pairs": "1"})


def test_the_table_and_the_chart_come_from_the_written_run(tmp_path) -> None:
    steps = tuple(rounds_of({"h2-rapid-reset": [(1000.0, 400.0), (1000.0, 420.0)]}))
    retention = attack_retention(steps)
    case = make_case("nginx", steps, summary=Summary(peak=1000.0, attack_retention=retention))
    run = Run("r1", "2026-12-07T00:00:00+00:00", None, HOST, {}, {"profile": {}}, (case,))
    write_run(run, tmp_path / "r1")
    back = read_run(tmp_path / "r1")
    assert back.cases[0].summary.attack_retention == retention
    rendered = ATTACKS.render(attack_rows(back.cases), "bracketed")
    assert rendered.headers[:3] == ("server", "attack", "pairs")
    row = rendered.text_rows()[0]
    assert row[1] == "h2-rapid-reset" and row[5].startswith("0.41")
    assert ATTACKS.title in run_markdown(back)
    figure = attacks_figure(build_series([back]))
    assert figure is not None
    (bar,) = figure.axes[0].patches
    assert bar.get_height() == pytest.approx(retention[0].retained)


def test_a_retention_is_refused_with_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="retained_ci"):
        AttackRetention("a", 2, 1.0, 1.0, 1.0, (1.2, 0.9), None, None, "")


def attack_case(framework: str, peak_per_s: float | None, kept: float) -> Case:
    """An h2-attacks case as the runner writes it: its closed-loop peak round (unless the
    rate was fixed: `peak_per_s` None) at 100 in flight, then two attacks' rounds at half
    the peak, the attack rounds keeping `kept` of the goodput, with their retention."""
    paced = (peak_per_s or 1000.0) / 2
    rounds = [
        dataclasses.replace(step, offered=paced)
        for step in rounds_of(
            {
                "h2-rapid-reset": [(paced, paced * kept), (paced, paced * kept)],
                "h2-ping-flood": [(paced, paced), (paced, paced)],
            }
        )
    ]
    steps = tuple(rounds)
    if peak_per_s is not None:
        peak = Step(**{**attack_round(NO_ATTACK, 0, peak_per_s).__dict__, "figures": StepFigures()})
        steps = (dataclasses.replace(peak, offered=100, unit="concurrency"), *steps)
    summary = Summary(peak=peak_per_s or paced, attack_retention=attack_retention(steps))
    return make_case(framework, steps, summary=summary)


def attack_run(tmp_path: Path, cases: tuple[Case, ...]) -> Path:
    """A written h2-attacks run, with charts an earlier drawing left in its folder."""
    profile = {"name": "h2-attacks", "ramp": {"kind": "h2-attacks", "attacks": ["h2-ping-flood"]}}
    run = Run("r1", "2026-12-07T00:00:00+00:00", None, HOST, {}, {"profile": profile}, cases)
    write_run(run, tmp_path / "r1")
    (tmp_path / "r1" / "charts").mkdir()
    for stale in ("throughput", "latency", "peak", "notes-of-mine"):
        (tmp_path / "r1" / "charts" / f"{stale}.png").write_bytes(b"drawn before")
    return tmp_path / "r1"


def test_an_attack_run_draws_no_load_line_and_its_report_shows_only_what_was_drawn(
    tmp_path: Path,
) -> None:
    run_dir = attack_run(
        tmp_path, (attack_case("nginx", 2000.0, 0.4), attack_case("aiohttp", 1000.0, 0.9))
    )
    report = render([run_dir]).read_text()
    drawn = {png.stem for png in (run_dir / "charts").glob("*.png")}
    # a paced round on a connections axis beside the peak round would be meaningless
    assert drawn == {"attacks", "attack_p99", "attack_peak", "notes-of-mine"}
    figures = report[report.index("<h2>Figures</h2>") : report.index("<h2>Flags</h2>")]
    assert figures.count("<figure>") == 3
    assert figures.index("goodput each server") < figures.index("p99 in the rounds")
    assert "closed-loop peak round" in figures and "Peak sustained throughput" not in figures
    links = re.findall(r"\[([\w-]+)\]\(", run_markdown(read_run(run_dir), run_dir))
    assert {"attacks", "attack_p99", "attack_peak"} <= set(links)
    assert not {"throughput", "latency", "peak"} & set(links)


def test_the_p99_chart_pairs_each_attacks_p99_without_and_with_per_server() -> None:
    case = attack_case("nginx", 2000.0, 0.4)
    figure = attack_p99_figure(build_series([Run("r", "t", None, HOST, {}, {}, (case,))]))
    assert figure is not None
    try:
        axes = figure.axes[0]
        assert {p.get_gid(): p.get_height() for p in axes.patches} == {
            "p99:nginx:h2-rapid-reset:without": 4.0,
            "p99:nginx:h2-rapid-reset:with": 20.0,
            "p99:nginx:h2-ping-flood:without": 4.0,
            "p99:nginx:h2-ping-flood:with": 20.0,
        }
        assert [t.get_text() for t in axes.texts] == ["5×", "5×"]  # p99 with / without
    finally:
        close_all({"p99": figure})


def test_the_peak_chart_is_the_closed_loop_round_and_absent_when_the_rate_was_fixed() -> None:
    measured, fixed = attack_case("nginx", 2000.0, 0.4), attack_case("aiohttp", None, 0.9)
    figure = attack_peak_figure(
        build_series([Run("r", "t", None, HOST, {}, {}, (measured, fixed))])
    )
    assert figure is not None
    try:
        (bar,) = figure.axes[0].patches
        assert bar.get_height() == 2000.0  # the peak round, not a paced round's 1,000
        assert [t.get_text() for t in figure.axes[0].texts] == ["2,000\npaced at 1,000 req/s"]
    finally:
        close_all({"peak": figure})
    alone = build_series([Run("r", "t", None, HOST, {}, {}, (fixed,))])
    assert attack_peak_figure(alone) is None


def test_an_attack_run_is_not_overlaid_on_a_concurrency_ramp(tmp_path: Path) -> None:
    attacks = attack_run(tmp_path, (attack_case("nginx", 2000.0, 0.4),))
    ramp = tmp_path / "ramp"
    ramp_case = make_case("nginx", (attack_case("nginx", 2000.0, 0.4).steps[0],))
    write_run(Run("ramp", "2026-12-07T00:00:00+00:00", None, HOST, {}, {}, (ramp_case,)), ramp)
    with pytest.raises(UserError, match=r"ramp different loads .*\(h2-attacks\)"):
        render([attacks, ramp])

"""Thresholds: the rule parser, judging on the interval, profiles' [thresholds] tables,
the results field, the summary table and the report section (model.thresholds). No
server: cases are built with model.results."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import harness.profile
from charts.report import render_html
from harness.outputs.console import threshold_table
from harness.profile import load_profile
from model.errors import UserError
from model.results import read_run, write_run
from model.thresholds import judge_thresholds, parse_threshold, unmatched
from servers import FRAMEWORKS
from tests.helpers import DATA_DIR, synthetic_case, synthetic_run


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("aiohttp: peak >= 20000", "aiohttp: peak >= 20000"),
        ("*:errors==0", "*: errors == 0"),
        ("  gevent :  p99_ms <= 50.5 ", "gevent: p99_ms <= 50.5"),
        ("*: ratio_to_nginx >= 0.1", "*: ratio_to_nginx >= 0.1"),
        ("nginx: server_cpu_pct < 1e2", "nginx: server_cpu_pct < 100"),
        ("*: lost == 0", "*: lost == 0"),
        ("twisted: peak > 2_000", "twisted: peak > 2000"),
    ],
)
def test_rules_parse_to_one_canonical_text(text: str, canonical: str) -> None:
    assert parse_threshold(text, FRAMEWORKS).text == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("aiohttp peak >= 1", "is not like FRAMEWORK: METRIC OP NUMBER"),
        ("aiohttp: peak", "is not like FRAMEWORK: METRIC OP NUMBER"),
        ("", "is not like"),
        ("aiohtp: peak >= 1", "unknown framework 'aiohtp': choose from *, gevent"),
        ("aiohttp: rps >= 1", "unknown metric 'rps': choose from peak, ratio_to_nginx"),
        ("aiohttp: peak = 1", "unknown comparison '=': choose from >=, <=, ==, >, <"),
        ("aiohttp: peak != 1", "unknown comparison '!='"),
        ("aiohttp: peak >= 20,000", "'20,000' is not a number"),
        ("aiohttp: peak >= nan", "the bound must be a finite number"),
    ],
)
def test_a_bad_rule_is_named_with_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="threshold") as caught:
        parse_threshold(text, FRAMEWORKS)
    assert message in str(caught.value)
    assert repr(text) in str(caught.value)
    assert "\n" not in str(caught.value)


def judge_one(rule: str, case):  # type: ignore[no-untyped-def]
    (result,) = judge_thresholds([parse_threshold(rule)], [case])
    return result


def test_a_floor_is_judged_on_the_intervals_low_end() -> None:
    case = synthetic_case("aiohttp", [1000.0, 1100.0, 1200.0])  # mean 1100, t interval ±248
    low, high = case.summary.peak_ci or (0, 0)
    assert low < 1000 < 1100 < high
    meets_mean = judge_one("aiohttp: peak >= 1050", case)
    assert meets_mean.value == 1100.0 and not meets_mean.held  # the mean would pass
    assert meets_mean.judged_on == "interval low end"
    assert meets_mean.interval == case.summary.peak_ci
    assert judge_one(f"aiohttp: peak >= {low}", case).held
    assert not judge_one(f"aiohttp: peak > {low}", case).held


def test_a_ceiling_is_judged_on_the_intervals_high_end() -> None:
    case = synthetic_case("gevent", [900.0, 905.0, 910.0], p99_ms=[40.0, 45.0, 50.0])
    assert case.summary.p99_at_peak_ms == 45.0
    result = judge_one("gevent: p99_ms <= 50", case)
    assert result.judged_on == "interval high end" and not result.held  # high end ≈ 57
    assert judge_one("gevent: p99_ms <= 60", case).held
    assert not judge_one("gevent: p99_ms == 45", case).held  # the whole interval is not 45


def test_without_rounds_the_value_itself_is_judged_and_said_so() -> None:
    case = synthetic_case("aiohttp", [])  # the ramp's peak alone: 1000, no interval
    result = judge_one("aiohttp: peak >= 1000", case)
    assert (result.held, result.interval, result.judged_on) == (True, None, "value (no interval)")
    assert not judge_one("aiohttp: peak >= 1000.5", case).held


def test_errors_count_every_step_and_round_and_lost_comes_from_reconcile() -> None:
    clean = synthetic_case("aiohttp", [1000.0, 1010.0])
    assert judge_one("*: errors == 0", clean).held
    erring = synthetic_case("aiohttp", [1000.0, 1010.0], round_errors=3)
    assert erring.summary.errors_total == 0  # the ramp's steps were clean, the rounds not
    result = judge_one("*: errors == 0", erring)
    assert (result.value, result.held) == (6.0, False)
    losing = synthetic_case("aiohttp", [1000.0], reconcile={"sent": 10, "stored": 8, "lost": 2})
    assert judge_one("*: lost == 0", losing).value == 2.0
    assert not judge_one("*: lost == 0", losing).held
    assert judge_one("*: lost == 0", clean).held  # a scenario that stores nothing lost nothing


def test_a_case_that_failed_or_lacks_the_figure_does_not_hold() -> None:
    failed = synthetic_case("tornado", [], status="failed")
    result = judge_one("*: errors == 0", failed)
    assert not result.held and result.judged_on.startswith("case failed: tornado would not")
    alone = synthetic_case("aiohttp", [1000.0, 1010.0])  # no nginx in the run
    result = judge_one("*: ratio_to_nginx >= 0.1", alone)
    assert (result.value, result.held) == (None, False)
    assert result.judged_on == "no value: no nginx peak beside it"


def test_star_leaves_out_skipped_cases_but_a_named_rule_does_not() -> None:
    skipped = synthetic_case("nginx", [], status="skipped")
    ran = synthetic_case("aiohttp", [1000.0, 1010.0])
    rules = [parse_threshold("*: errors == 0"), parse_threshold("nginx: peak >= 1")]
    results = judge_thresholds(rules, [ran, skipped])
    assert [(r.rule, r.framework, r.held) for r in results] == [
        ("*: errors == 0", "aiohttp", True),
        ("nginx: peak >= 1", "nginx", False),
    ]
    assert unmatched([parse_threshold("gevent: peak >= 1")], [ran, skipped])


def test_a_profiles_thresholds_table_and_the_command_line_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_profile("smoke").thresholds == ()  # the shipped profiles gate nothing
    shutil.copy(harness.profile.PROFILES_DIR / "smoke.toml", tmp_path / "gated.toml")
    with (tmp_path / "gated.toml").open("a") as toml:
        toml.write('\n[thresholds]\nrules = ["*: errors == 0", "aiohttp: peak >= 2e4"]\n')
    (tmp_path / "loose.toml").write_text(
        (tmp_path / "gated.toml").read_text().replace("rules =", "rule =")
    )
    (tmp_path / "wrong.toml").write_text(
        (tmp_path / "gated.toml").read_text().replace("2e4", "lots")
    )
    monkeypatch.setattr(harness.profile, "PROFILES_DIR", tmp_path)
    profile = load_profile("gated", {"thresholds": ["*:errors==0", "gevent: p99_ms <= 50"]})
    assert profile.thresholds == (
        "*: errors == 0",
        "aiohttp: peak >= 20000",
        "gevent: p99_ms <= 50",
    )
    assert profile.to_dict()["thresholds"] == list(profile.thresholds)  # JSON-shaped
    with pytest.raises(UserError, match=r"profile loose: \[thresholds\] holds only rules ="):
        load_profile("loose")
    with pytest.raises(UserError, match="profile wrong: threshold 'aiohttp: peak >= lots'"):
        load_profile("wrong")


def test_threshold_results_are_stored_in_the_run_and_read_back(tmp_path: Path) -> None:
    cases = [synthetic_case("aiohttp", [1000.0, 1100.0, 1200.0])]
    rules = [parse_threshold("aiohttp: peak >= 20000"), parse_threshold("*: errors == 0")]
    run = dataclasses.replace(
        synthetic_run("20261201-100000.000-quick", cases),
        thresholds=judge_thresholds(rules, cases),
    )
    write_run(run, tmp_path)
    stored = json.loads((tmp_path / "run.json").read_text())["thresholds"]
    assert stored[0] == {
        "rule": "aiohttp: peak >= 20000",
        "framework": "aiohttp",
        "case": cases[0].key,
        "value": 1100.0,
        "interval": list(cases[0].summary.peak_ci or ()),
        "held": False,
        "judged_on": "interval low end",
    }
    assert read_run(tmp_path) == run
    assert read_run(DATA_DIR / "run_v3").thresholds == ()  # /3: no rules were judged


def test_the_summary_and_the_report_list_each_failure(tmp_path: Path) -> None:
    cases = [synthetic_case("aiohttp", [1000.0, 1100.0, 1200.0])]
    rules = [parse_threshold("aiohttp: peak >= 20000"), parse_threshold("*: errors == 0")]
    run = dataclasses.replace(
        synthetic_run("20261201-100000.000-quick", cases),
        thresholds=judge_thresholds(rules, cases),
    )
    console = Console(width=200, record=True)
    console.print(threshold_table(run))
    text = console.export_text()
    assert "thresholds: 1 held, 1 failed" in text
    assert "aiohttp: peak >= 20000" in text and "FAILED" in text and "interval low end" in text
    html = render_html([run], {})
    assert "<h3>Thresholds</h3>" in html
    assert "1 of 2 threshold checks failed: aiohttp: peak &gt;= 20000" in html
    assert threshold_table(synthetic_run("x", cases)) is None
    assert "<h3>Thresholds</h3>" not in render_html([synthetic_run("x", cases)], {})


def test_cpu_per_request_and_memory_peak_can_be_gated() -> None:
    """`cpu_us_per_req` judged on its interval's high end for `<=`; `memory_peak_mb` on its
    value (bytes / 1e6); a case without them fails the rule, saying why."""
    case = synthetic_case("aiohttp", [1000.0])
    measured = dataclasses.replace(
        case,
        summary=dataclasses.replace(
            case.summary,
            cpu_us_per_req=80.0,
            cpu_us_per_req_ci=(70.0, 95.0),
            memory_peak_bytes=40_000_000,
        ),
    )
    [tight, loose, small, big] = judge_thresholds(
        [
            parse_threshold("aiohttp: cpu_us_per_req <= 90"),
            parse_threshold("aiohttp: cpu_us_per_req <= 100"),
            parse_threshold("aiohttp: memory_peak_mb <= 30"),
            parse_threshold("aiohttp: memory_peak_mb <= 50"),
        ],
        [measured],
    )
    assert (tight.held, tight.judged_on) == (False, "interval high end")
    assert loose.held and not small.held and big.held and big.value == 40.0
    [unmeasured] = judge_thresholds([parse_threshold("aiohttp: cpu_us_per_req <= 100")], [case])
    assert not unmeasured.held and "no server CPU per reply" in unmeasured.judged_on

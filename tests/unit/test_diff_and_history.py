"""`harness diff`, `harness history` and `harness trend` on run.json files written with
model.results (harness.diff, harness.history, charts.trend): the rule, the exit status,
other hosts, unreadable directories, steps beyond noise. The commands are called
in-process, as their typer wrappers call them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from charts.trend import short_run_label, trend_figure
from harness.cli.diff import diff
from harness.cli.history import history
from harness.cli.trend import trend
from harness.diff import diff_runs, measure_change
from harness.history import (
    TrendPoint,
    list_history,
    steps_beyond_noise,
    trend_runs,
    trend_series,
)
from model.errors import UserError
from model.results import Case, Run, write_run
from tests.helpers import SYNTHETIC_HOST, synthetic_case, synthetic_run

BASE = [10000.0, 10150.0, 9900.0, 10050.0, 9950.0]  # five rounds, ~1 % apart


def scaled(values: list[float], factor: float) -> list[float]:
    return [v * factor for v in values]


def written(directory: Path, run: Run) -> Path:
    directory.mkdir(parents=True)
    write_run(run, directory)
    return directory


def two_runs(
    tmp_path: Path, old: list[Case], new: list[Case], **new_run: object
) -> tuple[Path, Path]:
    a = written(tmp_path / "a", synthetic_run("20261201-100000.000-quick", old))
    b = written(tmp_path / "b", synthetic_run("20261201-110000.000-quick", new, **new_run))  # type: ignore[arg-type]
    return a, b


def test_a_change_needs_the_test_and_the_interval() -> None:
    same = measure_change(1.0, 1.0, BASE, BASE)
    assert same.measured and not same.significant
    assert same.p == 1.0 and same.interval is not None and not same.interval.excludes(1.0)
    slower = measure_change(1.0, 1.0, BASE, scaled(BASE, 0.8))
    assert slower.significant and slower.ratio == pytest.approx(0.8)
    assert slower.p is not None and slower.p < 0.01
    # three rounds a side, far apart: Welch's t tells them (a rank test could not: 0.1)
    few = measure_change(1.0, 1.0, BASE[:3], scaled(BASE[:3], 0.5))
    assert few.interval is not None and few.interval.excludes(1.0)
    assert few.p is not None and few.p < 0.001 and few.significant
    # overlapping rounds: no change
    near = measure_change(1.0, 1.0, BASE, scaled(BASE, 1.005))
    assert near.p is not None and near.p > 0.05 and not near.significant
    no_rounds = measure_change(1000.0, 900.0, [], [900.0])
    assert (no_rounds.ratio, no_rounds.interval, no_rounds.p) == (0.9, None, None)


def test_a_run_diffed_with_itself_changes_nowhere_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [synthetic_case("aiohttp", BASE), synthetic_case("nginx", scaled(BASE, 8))]
    a = written(tmp_path / "a", synthetic_run("20261201-100000.000-quick", cases))
    assert diff(a, a, factor=1.1, allow_other_host=False, as_json=False) == 0
    out = capsys.readouterr().out
    assert out.count("no significant") == 4  # peak and p99 of both cases (a cell may wrap)
    assert "faster" not in out and "slower" not in out
    assert diff(a / "run.json", a, factor=1.1, allow_other_host=False, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["verdict"] for c in data["cases"]] == ["no significant change"] * 2
    assert data["cases"][0]["peak"]["ratio"] == 1.0 and data["exit_status"] == 0


def test_slower_beyond_the_factor_exits_1_and_within_it_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = [synthetic_case("aiohttp", BASE), synthetic_case("twisted", BASE)]
    new = [
        synthetic_case("aiohttp", scaled(BASE, 0.8)),  # 20 % slower
        synthetic_case("twisted", scaled(BASE, 0.95)),  # 5 % slower: real, within 1.10
    ]
    a, b = two_runs(tmp_path, old, new)
    assert diff(a, b, factor=1.1, allow_other_host=False, as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    aiohttp, twisted = data["cases"]
    assert (aiohttp["verdict"], aiohttp["beyond_factor"]) == ("slower", True)
    low, high = aiohttp["peak"]["ci"]
    assert low <= 0.8 <= high < 1.0 and aiohttp["peak"]["p"] < 0.05
    assert (twisted["verdict"], twisted["beyond_factor"]) == ("slower", False)
    assert data["worse_beyond_factor"] == ["aiohttp"]
    # a looser factor forgives the 20 %; the other way round it is faster, never a failure
    assert diff(a, b, factor=1.3, allow_other_host=False, as_json=False) == 0
    assert diff(b, a, factor=1.1, allow_other_host=False, as_json=False) == 0
    out = capsys.readouterr().out
    assert "faster, beyond 1.1×" in out
    with pytest.raises(UserError, match=r"--factor must be at least 1\.0"):
        diff(a, b, factor=0.9, allow_other_host=False, as_json=False)


def test_overlapping_rounds_are_no_significant_change(tmp_path: Path) -> None:
    noisy = [10000.0, 12000.0, 8500.0, 11000.0, 9000.0]
    shifted = [9500.0, 11500.0, 8200.0, 10800.0, 8600.0]  # 4 % lower on average, noise 15 %
    result = diff_runs(
        synthetic_run("a", [synthetic_case("gevent", noisy)]),
        synthetic_run("b", [synthetic_case("gevent", shifted)]),
    )
    (case,) = result.cases
    assert case.verdict == "no significant change" and result.exit_status == 0
    assert case.peak.interval is not None and not case.peak.interval.excludes(1.0)


# two runs of one commit, each to ±2 %: the same server, rounds within 1.5 % of each other
RUN_ONE = [10000.0, 10120.0, 9880.0, 10060.0, 9940.0, 10010.0]
RUN_TWO = [10050.0, 9900.0, 10100.0, 9970.0, 10030.0, 9950.0]


def test_runs_to_a_precision_overlap_and_a_ten_percent_slower_server_is_told_apart() -> None:
    one = synthetic_run("a", [synthetic_case("aiohttp", RUN_ONE, precision_pct=2.0)])
    two = synthetic_run("b", [synthetic_case("aiohttp", RUN_TWO, precision_pct=2.0)])
    slower = synthetic_run(
        "c", [synthetic_case("aiohttp", [0.9 * v for v in RUN_TWO], precision_pct=2.0)]
    )
    for run in (one, two):
        (case,) = run.cases
        assert "imprecise" not in case.summary.flags and case.summary.half_width_pct < 2.0
    low_a, high_a = one.cases[0].summary.peak_ci  # type: ignore[misc]
    low_b, high_b = two.cases[0].summary.peak_ci  # type: ignore[misc]
    assert low_a <= high_b and low_b <= high_a  # the intervals overlap
    (same,) = diff_runs(one, two).cases
    assert same.verdict == "no significant change" and same.note is None
    assert same.to_dict()["half_width_pct"] == {
        "a": one.cases[0].summary.half_width_pct,
        "b": two.cases[0].summary.half_width_pct,
    }
    (found,) = diff_runs(one, slower).cases
    assert found.verdict == "slower" and found.peak.p is not None and found.peak.p < 0.05
    assert found.peak.interval is not None and found.peak.interval.high < 1.0


def test_two_servers_of_one_run_are_diffed_with_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`harness diff RUN --pair spin=spin-slow`: one run's two cases, B's against A's; a pair
    with no such cases, a malformed one, or one run without a pair is one clear line."""
    cases = [
        synthetic_case("spin", RUN_ONE),
        synthetic_case("spin-slow", [0.9 * v for v in RUN_TWO]),
        synthetic_case("nginx", scaled(BASE, 8)),
    ]
    one = written(tmp_path / "one", synthetic_run("20261201-100000.000-quick", cases))
    assert diff(one, None, factor=1.05, allow_other_host=False, as_json=True,
                pairs=["spin=spin-slow"]) == 1  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    (case,) = data["cases"]  # only the pair: nginx is not a case of the diff
    assert case["label"] == "spin → spin-slow" and case["verdict"] == "slower"
    assert case["peak"]["ratio"] == pytest.approx(0.9, abs=0.01) and case["peak"]["p"] < 0.05
    assert data["pairs"] == ["spin=spin-slow"] and data["only_in_a"] == []
    # the other way round, and across two runs alike
    assert diff(one, one, factor=1.05, allow_other_host=False, as_json=True,
                pairs=["spin-slow=spin"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["cases"][0]["verdict"] == "faster"
    with pytest.raises(UserError, match="no case of spin in run A has a case of tornado"):
        diff(one, None, factor=1.1, allow_other_host=False, as_json=True, pairs=["spin=tornado"])
    with pytest.raises(UserError, match="--pair takes two case names, A=B"):
        diff(one, None, factor=1.1, allow_other_host=False, as_json=True, pairs=["spin"])
    with pytest.raises(UserError, match="one run given: name the cases to compare"):
        diff(one, None, factor=1.1, allow_other_host=False, as_json=True)


def test_an_imprecise_side_is_named_when_no_change_is_found() -> None:
    wide = [10000.0, 12500.0, 8000.0, 11000.0, 9000.0]
    imprecise = synthetic_run("a", [synthetic_case("aiohttp", wide, precision_pct=5.0)])
    precise = synthetic_run("b", [synthetic_case("aiohttp", RUN_ONE, precision_pct=5.0)])
    (case,) = diff_runs(imprecise, precise).cases
    assert case.verdict == "no significant change"
    assert case.note is not None and case.note.startswith("A imprecise (±")


def test_p99_is_reported_beside_and_never_sets_the_exit_status(tmp_path: Path) -> None:
    old = synthetic_case("gevent", BASE, p99_ms=[30.0, 31.0, 29.0, 30.5, 29.5])
    new = synthetic_case("gevent", BASE, p99_ms=[60.0, 62.0, 58.0, 61.0, 59.0])
    result = diff_runs(synthetic_run("a", [old]), synthetic_run("b", [new]))
    (case,) = result.cases
    assert case.p99_change == "higher" and case.p99.ratio == pytest.approx(2.0)
    assert case.verdict == "no significant change" and result.exit_status == 0


def test_cases_without_rounds_failed_or_in_one_run_only_are_said_so() -> None:
    old = [
        synthetic_case("aiohttp", []),  # the ramp's peak alone: 1000
        synthetic_case("tornado", BASE),
        synthetic_case("twisted", BASE),
        synthetic_case("gevent", BASE[:3]),
    ]
    new = [
        synthetic_case("aiohttp", [], status="ok"),
        synthetic_case("tornado", [], status="failed"),
        synthetic_case("gevent", scaled(BASE[:3], 0.5)),
        synthetic_case("eventlet", BASE),
    ]
    result = diff_runs(synthetic_run("a", old), synthetic_run("b", new))
    by_name = {c.label: c for c in result.cases}
    assert by_name["aiohttp"].verdict == "no rounds"
    assert by_name["aiohttp"].peak.ratio == 1.0 and by_name["aiohttp"].peak.interval is None
    assert by_name["tornado"].verdict == "not comparable"
    assert by_name["tornado"].note == "B: failed (tornado would not start)"
    # gevent alone had rounds on both sides: a family of one, its p as it is
    assert by_name["gevent"].verdict == "slower" and by_name["gevent"].beyond_factor
    assert by_name["gevent"].peak.p_adjusted == by_name["gevent"].peak.p
    assert (result.only_in_old, result.only_in_new) == (("twisted",), ("eventlet",))
    assert result.exit_status == 1


def test_rounds_at_a_different_load_are_said_so() -> None:
    """A ramp whose steps are within noise may peak at 50 connections in one run and 200 in
    the next: the rounds then measure two operating points, and the note says so."""
    old = synthetic_case("node-express", BASE)
    moved = synthetic_case("node-express", scaled(BASE, 1.04))
    moved = dataclasses.replace(moved, summary=dataclasses.replace(moved.summary, peak_offered=200))
    [same] = diff_runs(synthetic_run("a", [old]), synthetic_run("b", [old])).cases
    assert same.note is None
    [change] = diff_runs(synthetic_run("a", [old]), synthetic_run("b", [moved])).cases
    assert change.verdict == "faster" and not change.beyond_factor
    assert change.note is not None and "offered 100 in A, 200 in B" in change.note


def test_cases_are_matched_on_process_model_too() -> None:
    old = [synthetic_case("aiohttp", BASE), synthetic_case("aiohttp", BASE, process_model="lb:2")]
    new = [synthetic_case("aiohttp", scaled(BASE, 0.7), process_model="lb:2")]
    result = diff_runs(synthetic_run("a", old), synthetic_run("b", new))
    (case,) = result.cases
    assert case.label == "aiohttp [lb:2]" and case.verdict == "slower"
    assert result.only_in_old == ("aiohttp [single]",)


def test_runs_of_other_hosts_are_refused_unless_asked_for_and_then_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [synthetic_case("aiohttp", BASE)]
    other = {**SYNTHETIC_HOST, "hostname": "ci-runner", "cores": 8}
    a, b = two_runs(tmp_path, cases, cases, host=other)
    with pytest.raises(UserError) as refused:
        diff(a, b, factor=1.1, allow_other_host=False, as_json=False)
    message = str(refused.value)
    assert "different hosts" in message and "--allow-other-host" in message
    assert "hostname: 'vm' vs 'ci-runner'" in message and "cores: 2 vs 8" in message
    assert "\n" not in message
    assert diff(a, b, factor=1.1, allow_other_host=True, as_json=False) == 0
    assert "DIFFERENT HOSTS: hostname: 'vm' vs 'ci-runner'" in capsys.readouterr().out
    diff(a, b, factor=1.1, allow_other_host=True, as_json=True)
    assert json.loads(capsys.readouterr().out)["other_host"] == [
        "hostname: 'vm' vs 'ci-runner'",
        "cores: 2 vs 8",
    ]


def test_runs_under_other_limits_are_diffed_and_the_limits_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --cpu-quota run against an unlimited one: diffed (what the quota costs is a fair
    question), the limits that differ said in the title, the JSON and the Markdown."""
    a = written(
        tmp_path / "a",
        synthetic_run("20261201-100000.000-quick", [synthetic_case("aiohttp", BASE)]),
    )
    capped = synthetic_run(
        "20261201-110000.000-quick", [synthetic_case("aiohttp", scaled(BASE, 0.5))]
    )
    b = written(
        tmp_path / "b", dataclasses.replace(capped, config={**capped.config, "cpu_quota": 0.5})
    )
    markdown = tmp_path / "diff.md"
    assert diff(a, b, factor=1.1, allow_other_host=False, as_json=False, markdown=markdown) == 1
    assert "DIFFERENT LIMITS: cpu_quota: None vs 0.5" in capsys.readouterr().out
    assert "**Different limits**: cpu_quota: None vs 0.5" in markdown.read_text()
    diff(a, b, factor=1.1, allow_other_host=False, as_json=True)
    assert json.loads(capsys.readouterr().out)["other_limits"] == ["cpu_quota: None vs 0.5"]
    diff(a, a, factor=1.1, allow_other_host=False, as_json=True)
    assert json.loads(capsys.readouterr().out)["other_limits"] == []


def test_a_missing_or_broken_run_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text("{not json")
    with pytest.raises(UserError, match=r"holds no run\.json"):
        diff(tmp_path, tmp_path, factor=1.1, allow_other_host=False, as_json=False)
    with pytest.raises(UserError, match=r"broken/run\.json: Expecting property name"):
        diff(tmp_path / "broken", tmp_path, factor=1.1, allow_other_host=False, as_json=False)


def results_with_history(tmp_path: Path) -> Path:
    """results/: four quick runs on this host (aiohttp steps down 20 % at the third),
    one quick run on another host, one smoke run, and three directories that are not
    readable runs."""
    results = tmp_path / "results"
    aiohttp = [BASE, scaled(BASE, 1.01), scaled(BASE, 0.8), scaled(BASE, 0.81)]
    for hour, rounds in enumerate(aiohttp):
        run_id = f"20261201-1{hour}0000.000-quick"
        cases = [synthetic_case("aiohttp", rounds), synthetic_case("nginx", scaled(BASE, 8))]
        written(results / run_id, synthetic_run(run_id, cases, started=f"2026-12-01T1{hour}:00"))
    elsewhere = {**SYNTHETIC_HOST, "hostname": "laptop"}
    other = "20261201-090000.000-quick"
    elsewhere_run = synthetic_run(other, [synthetic_case("aiohttp", BASE)], host=elsewhere)
    written(results / other, elsewhere_run)
    smoke = "20261201-200000.000-smoke"
    written(results / smoke, synthetic_run(smoke, [synthetic_case("gevent", [])], profile="smoke"))
    (results / "20261201-210000.000-quick").mkdir()  # claimed, never written
    (results / "20261201-220000.000-quick").mkdir()
    (results / "20261201-220000.000-quick" / "run.json").write_text('{"schema": "harness.run/9"}')
    (results / ".cache").mkdir()
    (results / "trend-quick.png").write_bytes(b"")
    return results


def test_history_lists_runs_newest_first_and_unreadable_ones_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = results_with_history(tmp_path)
    entries = list_history(results)
    assert [e.name for e in entries] == [
        "20261201-220000.000-quick",
        "20261201-210000.000-quick",
        "20261201-200000.000-smoke",
        "20261201-130000.000-quick",
        "20261201-120000.000-quick",
        "20261201-110000.000-quick",
        "20261201-100000.000-quick",
        "20261201-090000.000-quick",
    ]
    assert "'harness.run/9' is not readable" in (entries[0].problem or "")
    assert entries[1].problem == "no run.json"
    history(results, as_json=True)
    rows = json.loads(capsys.readouterr().out)
    assert rows[1] == {"run": "20261201-210000.000-quick", "status": "unreadable",
                       "problem": "no run.json"}  # fmt: skip
    newest = rows[3]
    assert (newest["profile"], newest["host"], newest["status"]) == ("quick", "vm", "complete")
    assert newest["frameworks"] == ["aiohttp", "nginx"]
    assert newest["peaks"][0]["case"] == "aiohttp" and len(newest["peaks"][0]["ci"]) == 2
    assert rows[2]["peaks"] == [{"case": "gevent", "peak": 1000.0, "ci": None, "unit": "req/s"}]
    history(results, as_json=False)
    table = capsys.readouterr().out
    assert table.count("unreadable") == 2 and "aiohttp 8,108 [8,011, 8,205]" in table
    with pytest.raises(UserError, match="no results directory"):
        history(tmp_path / "nowhere", as_json=False)


def test_a_step_is_where_consecutive_intervals_do_not_overlap() -> None:
    def point(value: float, half: float | None) -> TrendPoint:
        interval = (value - half, value + half) if half is not None else None
        return TrendPoint(f"run{value}", "", value, interval)

    points = [point(100, 5), point(104, 5), point(120, 5), point(60, None), point(20, 5)]
    # 100→104 overlap; 104→120 do not; nothing is said next to a point without an interval
    assert steps_beyond_noise(points) == [2]
    assert steps_beyond_noise([]) == []


def test_trend_draws_one_host_and_marks_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = results_with_history(tmp_path)
    chosen = trend_runs(list_history(results), "quick")
    assert [r.run_id[9:11] for r in chosen.runs] == ["10", "11", "12", "13"]  # oldest first
    assert (chosen.host, chosen.other_hosts, chosen.unreadable) == ("vm", 1, 2)
    path = trend(results, profile="quick", out=tmp_path / "out" / "trend.png")
    assert path == tmp_path / "out" / "trend.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "4 runs of quick on vm" in out and "1 runs measured on other hosts" in out
    assert "step: aiohttp 10,110 → 8,008 (0.79×)" in out
    assert "from 20261201-110000.000-quick to 20261201-120000.000-quick" in out
    assert out.count("step:") == 1 and f"trend: {path}" in out
    assert trend(results, profile="quick", out=None) == results / "trend-quick.png"
    with pytest.raises(
        UserError, match=r"no readable runs of profile full .*: it holds quick, smoke"
    ):
        trend(results, profile="full", out=None)


def test_a_run_under_limits_is_a_series_of_its_own_not_a_step() -> None:
    """A --cpu-quota run's halved peak beside unlimited runs: its own series, labelled."""
    runs = [
        synthetic_run(f"20261201-1{hour}0000.000-quick", [synthetic_case("aiohttp", BASE)])
        for hour in range(2)
    ]
    capped = synthetic_run(
        "20261201-120000.000-quick", [synthetic_case("aiohttp", scaled(BASE, 0.5))]
    )
    capped = dataclasses.replace(
        capped, config={**capped.config, "cpu_quota": 0.5, "memory_max_bytes": 2**29}
    )
    series = trend_series([runs[0], capped, runs[1]])
    assert list(series) == ["aiohttp", "aiohttp (--cpu-quota 0.5, --memory-max 512 MiB)"]
    assert [p.run_id[9:11] for p in series["aiohttp"]] == ["10", "11"]
    assert steps_beyond_noise(series["aiohttp"]) == []  # the capped run is no step


def test_the_trend_figure_has_a_panel_per_case_and_rings_the_step() -> None:
    points = [TrendPoint(f"20261201-1{i}0000.000-quick", "", v, (v - 5, v + 5))
              for i, v in enumerate([100.0, 101.0, 150.0])]  # fmt: skip
    run_ids = [p.run_id for p in points]
    figure = trend_figure(run_ids, {"aiohttp": points, "nginx": points[:2]},
                          {"aiohttp": [2], "nginx": []}, "t")  # fmt: skip
    visible = [axes for axes in figure.axes if axes.get_visible()]
    assert [axes.get_title() for axes in visible] == ["aiohttp — 1 step(s)", "nginx"]
    gids = {artist.get_gid() for axes in visible for artist in axes.get_children()}
    assert "step:aiohttp:20261201-120000.000-quick" in gids
    assert not any(str(gid).startswith("step:nginx") for gid in gids)
    assert short_run_label(run_ids[0]) == "12-01 10:00" and short_run_label("mine") == "mine"


def _role(case: Case, role: str) -> Case:
    return dataclasses.replace(case, summary=dataclasses.replace(case.summary, role=role))


def test_the_machines_drift_from_the_baselines_is_taken_out_of_the_frameworks() -> None:
    """Two runs of one commit on a machine that got 19 % faster between them (every case
    moved alike): raw (the default), aiohttp reads significantly faster; judged against the
    baselines' median drift (--machine-drift) it is no change, and a framework that moved
    1.19× beyond the drift still is."""
    rounds = [10000.0, 10100.0, 9900.0, 10050.0, 9950.0]
    moved = [v * 1.19 for v in rounds]

    def run(run_id: str, aiohttp: list[float], gevent: list[float], drift: float) -> Run:
        baselines = [
            _role(synthetic_case(name, [v * drift * k for v in rounds]), "baseline")
            for name, k in (("nginx", 5.0), ("node-http", 2.0), ("eventmachine", 1.5))
        ]
        frameworks = [
            _role(synthetic_case("aiohttp", aiohttp), "framework"),
            _role(synthetic_case("gevent", gevent), "framework"),
        ]
        return synthetic_run(run_id, [*frameworks, *baselines])

    old = run("a", rounds, rounds, 1.0)
    new = run("b", moved, [v * 1.19 for v in moved], 1.19)
    plain = diff_runs(old, new)  # the default: raw, the drift reported
    assert {c.label: c.verdict for c in plain.cases}["aiohttp"] == "faster"
    assert plain.drift is not None and not plain.drift.applied
    assert "--machine-drift judges them" in plain.drift.text()
    result = diff_runs(old, new, machine_drift_applied=True)
    assert result.drift is not None and result.drift.factor == pytest.approx(1.19)
    verdicts = {c.label: c for c in result.cases}
    assert verdicts["aiohttp"].verdict == "no significant change"
    assert verdicts["aiohttp"].note is not None and "drift (1.190×)" in verdicts["aiohttp"].note
    assert verdicts["gevent"].verdict == "faster"  # 1.19× beyond the machine's 1.19×
    assert verdicts["gevent"].peak.ratio == pytest.approx(1.19, rel=0.01)
    assert verdicts["nginx"].verdict == "faster"  # the baselines are judged raw
    assert result.to_dict()["machine_drift"]["baselines"]["nginx"] == pytest.approx(1.19)
    # one baseline is not enough to call the machine's drift
    lone = synthetic_run("c", [old.cases[0], old.cases[2]])
    assert diff_runs(lone, synthetic_run("d", [new.cases[0], new.cases[2]])).drift is None


def with_cpu(case: Case, cpu_us: list[float], memory_bytes: int) -> Case:
    """`case` with its rounds' server CPU per reply and a memory peak (as cgroups give)."""
    rounds = tuple(
        dataclasses.replace(step, cpu_us_per_req=value)
        for step, value in zip(case.rounds, cpu_us, strict=True)
    )
    summary = dataclasses.replace(
        case.summary, cpu_us_per_req=sum(cpu_us) / len(cpu_us), memory_peak_bytes=memory_bytes
    )
    return dataclasses.replace(case, rounds=rounds, summary=summary)


def test_cpu_per_request_and_memory_peak_are_diffed_beside(tmp_path: Path) -> None:
    old = with_cpu(synthetic_case("gevent", BASE), [80.0, 81.0, 79.0, 80.5, 79.5], 40_000_000)
    new = with_cpu(synthetic_case("gevent", BASE), [96.0, 97.0, 95.0, 96.5, 95.5], 50_000_000)
    result = diff_runs(synthetic_run("a", [old]), synthetic_run("b", [new]))
    (case,) = result.cases
    assert case.cpu_us_per_req is not None and case.cpu_us_per_req.significant
    assert case.cpu_us_per_req.ratio == pytest.approx(1.2, rel=0.01)
    shown = case.to_dict()
    assert shown["cpu_us_per_req"]["change"] == "higher"
    assert shown["memory_peak_mb"]["ratio"] == pytest.approx(1.25)
    assert case.verdict == "no significant change" and result.exit_status == 0


def test_a_diff_of_many_cases_adjusts_its_p_values_for_their_number() -> None:
    """Thirteen cases, as a quick compare has: one moved by chance as far as eventmachine
    did between two runs of one commit here (rounds 0.92× apart, p 0.006 alone) is no
    significant change once adjusted for thirteen (Holm), and says so; a case 20 % slower
    stays slower."""
    names = [f"server{i}" for i in range(11)]
    old = [synthetic_case(name, BASE) for name in names]
    new = [synthetic_case(name, scaled(BASE, 1.002)) for name in names]
    chance_old = [60511.0, 59673.0, 60938.0, 56472.0, 61644.0]  # q8's eventmachine rounds
    chance_new = [56000.0, 55000.0, 54300.0, 55900.0]
    old += [synthetic_case("chance", chance_old), synthetic_case("slower", BASE)]
    new += [synthetic_case("chance", chance_new), synthetic_case("slower", scaled(BASE, 0.8))]
    result = diff_runs(synthetic_run("a", old), synthetic_run("b", new))
    by_name = {c.label: c for c in result.cases}
    chance = by_name["chance"]
    assert chance.peak.p is not None and chance.peak.p < 0.05  # alone it would be "slower"
    assert chance.peak.p_adjusted is not None and chance.peak.p_adjusted >= 0.05
    assert chance.verdict == "no significant change"
    assert chance.note is not None and "adjusted for the diff's 13 cases (Holm)" in chance.note
    assert by_name["slower"].verdict == "slower" and result.exit_status == 1
    assert all(by_name[name].verdict == "no significant change" for name in names)
    peak = result.to_dict()["cases"][-1]["peak"]
    assert peak["p_adjusted"] is not None and peak["p_adjusted"] >= peak["p"]

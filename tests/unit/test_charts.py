"""Figures and the report, drawn from small result fixtures; asserting on what was drawn."""

from __future__ import annotations

import dataclasses
import json
import re
from html import escape
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from charts.figures import Series, ramp_figures
from charts.render import build_series, render
from charts.report import render_html
from charts.style import colour_for, palette
from charts.tables import pinning_text
from drivers import histograms as hdr
from harness.run.analysis import with_baseline_ratios
from harness.run.verdict import verdict
from model.errors import UserError
from model.results import Case, Run, Step, Summary, write_run
from model.step_figures import StepFigures, figures_from_dict
from tests.helpers import synthetic_case, synthetic_run

HOST = {"cpu_model": "Test CPU", "cores": 2, "memory_bytes": 1 << 34, "kernel": "6.1"}


def make_step(
    offered: float,
    achieved: float,
    *,
    unit: str = "concurrency",
    errors: int = 0,
    p99: float | None = 2.0,
    cpu: float | None = 80.0,
    flags: tuple[str, ...] = (),
    rss: int | None = 40_000_000,
    tick_max: float | None = 3.0,
    figures: dict | None = None,
) -> Step:
    attempts = int(achieved) + errors
    return Step(
        offered=offered,
        unit=unit,
        achieved=achieved,
        replies=int(achieved),
        errors={"total": errors},
        error_rate=errors / attempts if attempts else 0.0,
        latency_ms={
            "avg": 1.0,
            "p50": 0.9,
            "p90": 1.5,
            "p99": p99,
            "p99.9": None,
            "p99.99": None,
            "max": 9.0,
        },
        server_cpu_pct=cpu,
        agent_cpu_pct=40.0,
        rss_max_bytes=rss,
        tick_ms={"avg": 0.5, "max": tick_max},
        probe_ms=1.2,
        flags=flags,
        figures=figures_from_dict(figures or {}),
    )


def make_case(
    framework: str,
    steps: tuple[Step, ...],
    status: str = "ok",
    mode: str = "both",
    summary: Summary | None = None,
) -> Case:
    peak = max((s.achieved for s in steps if not s.errors["total"]), default=None)
    return Case(
        framework,
        "text",
        "empty",
        "wrk",
        "single",
        {"mode": mode, "server": "0", "agent": "1"},
        status,  # type: ignore[arg-type]
        error=None if status == "ok" else f"{framework} {status}",
        verify={"text": {"ok": True, "detail": "200"}},
        steps=steps,
        summary=summary or Summary(peak=peak),
    )


def write(tmp_path: Path, name: str, cases: tuple[Case, ...], host: dict | None = None) -> Path:
    run = Run(
        name,
        "2026-11-30T00:00:00+00:00",
        "2026-11-30T00:01:00+00:00",
        host or HOST,
        {"python": "3.11"},
        {"profile": {"name": "quick", "description": "test"}},
        cases,
    )
    write_run(run, tmp_path / name)
    return tmp_path / name


def lines_by_gid(figure) -> dict[str, object]:
    return {line.get_gid(): line for axes in figure.axes for line in axes.get_lines()}


def series_of(cases: tuple[Case, ...]) -> list[Series]:
    run = Run("r", "t", None, HOST, {}, {}, cases)
    return build_series([run])


def test_concurrency_ramp_draws_a_line_per_framework_with_labels() -> None:
    steps = (make_step(50, 9000), make_step(100, 9500, flags=("driver_bound",)))
    cases = (
        make_case("aiohttp", steps),
        make_case("gevent", steps),
        make_case("twisted", (), status="failed"),
        make_case("tornado", (), status="skipped"),
    )
    figures = ramp_figures(series_of(cases), "text scenario, wrk, empty sink")
    assert {"throughput", "errors", "latency", "cpu", "memory", "peak"} <= set(figures)
    throughput = figures["throughput"]
    lines = lines_by_gid(throughput)
    assert {"aiohttp", "gevent"} <= set(lines)
    assert "twisted" not in lines and "tornado" not in lines  # no steps, no line
    assert "ideal" not in lines  # only rate ramps have the y = x line
    axes = throughput.axes[0]
    assert axes.get_xlabel() == "concurrent connections (closed loop)"
    assert axes.get_ylabel() == "achieved (replies/s)"
    assert axes.get_title().startswith("Throughput — text scenario")
    assert lines["aiohttp"].get_color() == colour_for("aiohttp")
    # the driver-bound step is drawn hollow, and the legend says why
    hollow = lines["flagged:aiohttp"]
    assert list(hollow.get_xdata()) == [100]
    assert hollow.get_markerfacecolor() == "white"
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert "hollow: driver_bound" in legend
    plt.close("all")


def test_rate_ramp_has_the_ideal_line_and_latency_goes_log_over_decades() -> None:
    steps = (
        make_step(500, 500, unit="req/s", p99=None),
        make_step(1000, 990, unit="req/s", p99=None),
        make_step(1500, 700, unit="req/s", errors=300, p99=None),
    )
    steps = (
        *steps[:2],
        Step(**{**steps[2].__dict__, "latency_ms": {**steps[2].latency_ms, "avg": 900.0}}),
    )
    figures = ramp_figures(series_of((make_case("gevent", steps),)))
    lines = lines_by_gid(figures["throughput"])
    assert list(lines["ideal"].get_xdata()) == [0, 1500]
    assert figures["throughput"].axes[0].get_xlabel() == "offered load (requests/s)"
    latency = figures["latency"]
    assert latency.axes[0].get_yscale() == "log"  # 1 ms .. 900 ms
    assert "gevent p99" not in lines_by_gid(latency)  # httperf measures no p99
    count_axes = figures["errors"].axes[0]
    errors_count = {line.get_gid(): line for line in count_axes.get_lines()}["gevent"]
    assert list(errors_count.get_ydata()) == [0, 0, 300]
    plt.close("all")


def test_single_step_and_missing_optional_fields_still_draw() -> None:
    lone = (make_step(100, 5000, cpu=None, rss=None, p99=None, tick_max=None),)
    figures = ramp_figures(series_of((make_case("eventlet", lone),)))
    assert list(lines_by_gid(figures["throughput"])["eventlet"].get_ydata()) == [5000]
    assert "eventlet" not in lines_by_gid(figures["cpu"])  # nothing measured, nothing drawn
    errors_axes = figures["errors"].axes[0]
    assert any(t.get_gid() == "no-errors" for t in errors_axes.texts)
    plt.close("all")


def test_peak_bars_skip_failed_cases() -> None:
    cases = (
        make_case("aiohttp", (make_step(50, 9000),)),
        make_case("gevent", (make_step(50, 4000),)),
        make_case("twisted", (), "failed"),
    )
    peak = ramp_figures(series_of(cases))["peak"]
    axes = peak.axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["aiohttp", "gevent"]
    assert [round(p.get_height()) for p in axes.patches] == [9000, 4000]
    plt.close("all")


def test_affinity_matrix_gets_grouped_bars() -> None:
    cases = tuple(
        make_case("aiohttp", (make_step(100, 1000 * (i + 1)),), mode=mode)
        for i, mode in enumerate(("both", "server", "agent", "none"))
    )
    figures = ramp_figures(series_of(cases))
    axes = figures["affinity"].axes[0]
    assert {p.get_gid() for p in axes.patches} >= {"mode:both", "mode:none"}
    assert len(axes.patches) == 4
    plt.close("all")


def test_connection_ramp_marks_the_breaking_point() -> None:
    steps = tuple(
        make_step(
            n,
            0,
            unit="conns",
            rss=30_000_000 + n * 10_000,
            tick_max=n / 10,
            figures={"open": n},
        )
        for n in (1000, 5000, 10000)
    )
    summary = Summary(breaking_point={"connections": 9000, "reason": "tick > 1 s"})
    figures = ramp_figures(series_of((make_case("aiohttp", steps, summary=summary),)))
    assert {"conn_cpu", "conn_rss", "conn_rss_per_connection", "conn_tick_max"} <= set(figures)
    per_connection = lines_by_gid(figures["conn_rss_per_connection"])["aiohttp"]
    assert per_connection.get_ydata()[0] == pytest.approx(40.0)  # 40 MB / 1,000 conns in KB
    tick = lines_by_gid(figures["conn_tick_max"])
    assert list(tick["breaking:aiohttp"].get_xdata()) == [9000, 9000]
    plt.close("all")


def _x_labels(figure) -> list[str]:
    figure.canvas.draw()  # tick labels are written when the figure is drawn
    return [t.get_text() for a in figure.axes for t in a.get_xticklabels() if t.get_text()]


def test_load_axes_read_with_thousands_separators() -> None:
    connections = tuple(
        make_step(n, 0, unit="conns", rss=30_000_000 + n * 4_000, figures={"open": n})
        for n in (250_000, 500_000, 750_000, 1_000_000)
    )
    rates = tuple(make_step(r, r, unit="req/s", errors=r // 100) for r in (5_000, 10_000, 20_000))
    figures = {
        **ramp_figures(series_of((make_case("node-http", connections),))),
        **ramp_figures(series_of((make_case("gevent", rates),))),
    }
    for name in ("conn_rss", "conn_tick_max", "throughput", "errors", "latency"):
        labels = _x_labels(figures[name])
        assert any(label.endswith(",000") for label in labels), (name, labels)
        assert not any(label.isdigit() and len(label) > 3 for label in labels), (name, labels)
    plt.close("all")


def test_report_is_self_contained_and_says_everything(tmp_path: Path) -> None:
    cases = (
        make_case("aiohttp", (make_step(50, 9000), make_step(100, 9500, flags=("noisy",)))),
        make_case("gevent", (), status="skipped"),
    )
    run_dir = write(tmp_path, "run-a", cases)
    report = render([run_dir])
    html = report.read_text()
    assert report == run_dir / "report.html"
    for name in ("throughput", "errors", "latency", "cpu", "memory", "peak"):
        png = run_dir / "charts" / f"{name}.png"
        assert png.read_bytes()[:4] == b"\x89PNG"
    assert html.count('src="data:image/png;base64,') == 6
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing fetched from a network
    for text in ("Test CPU", "gevent skipped", "driver_bound", "noisy", "Verify", "9,500"):
        assert text in html, text


def test_the_report_says_where_the_run_pinned_and_not_cpus_it_never_applied(
    tmp_path: Path,
) -> None:
    texts = {}
    for affinity in ("both", "none"):
        run_dir = write(tmp_path, affinity, (make_case("aiohttp", (make_step(50, 9000),)),))
        run_json = run_dir / "run.json"
        data = json.loads(run_json.read_text())
        data["config"] = {
            "profile": {"name": "quick", "affinity": affinity},
            "server_cpus": "0",
            "agent_cpus": "1",
        }
        run_json.write_text(json.dumps(data))
        texts[affinity] = render([run_dir]).read_text()
    assert "server CPUs 0, load CPUs 1" in texts["both"]
    assert "no CPU pinning (affinity none)" in texts["none"]
    assert "server CPUs" not in texts["none"]


@pytest.mark.parametrize(
    ("affinity", "text"),
    [
        ("both", "server CPUs 0, load CPUs 1"),
        ("server", "server CPUs 0, load unpinned (affinity server)"),
        ("agent", "server unpinned, load CPUs 1 (affinity agent)"),
        ("none", "no CPU pinning (affinity none)"),
        ("matrix", "affinity matrix: server CPUs 0, load CPUs 1 where pinned"),
    ],
)
def test_pinning_reads_as_each_affinity_mode_applied_it(affinity: str, text: str) -> None:
    assert pinning_text(affinity, "0", "1") == text


def test_overlay_of_two_runs_labels_each_run(tmp_path: Path) -> None:
    before = write(tmp_path, "before", (make_case("aiohttp", (make_step(50, 9000),)),))
    after = write(tmp_path, "after", (make_case("aiohttp", (make_step(50, 9900),)),))
    report = render([before, after])
    assert report == before / "overlay" / "report.html"
    assert (before / "overlay" / "charts" / "throughput.png").is_file()
    html = report.read_text()
    assert "Run before" in html and "Run after" in html
    runs = [
        Run(name, "t", None, HOST, {}, {}, (make_case("aiohttp", (make_step(50, y),)),))
        for name, y in (("before", 9000), ("after", 9900))
    ]
    figures = ramp_figures(build_series(runs))
    lines = lines_by_gid(figures["throughput"])
    assert list(lines["aiohttp (before)"].get_ydata()) == [9000]
    assert list(lines["aiohttp (after)"].get_ydata()) == [9900]
    assert lines["aiohttp (before)"].get_color() == lines["aiohttp (after)"].get_color()
    assert lines["aiohttp (before)"].get_linestyle() != lines["aiohttp (after)"].get_linestyle()
    plt.close("all")


def test_overlay_refuses_runs_from_different_hosts(tmp_path: Path) -> None:
    here = write(tmp_path, "here", (make_case("aiohttp", (make_step(50, 9000),)),))
    there = write(
        tmp_path,
        "there",
        (make_case("aiohttp", (make_step(50, 9000),)),),
        host={**HOST, "cores": 64},
    )
    with pytest.raises(UserError, match="different hosts \\(cores: 2 vs 64\\)"):
        render([here, there])


def test_overlay_refuses_different_kinds_of_ramp(tmp_path: Path) -> None:
    rate = write(tmp_path, "rate", (make_case("aiohttp", (make_step(50, 50, unit="req/s"),)),))
    conc = write(tmp_path, "conc", (make_case("aiohttp", (make_step(50, 9000),)),))
    with pytest.raises(UserError, match="ramp different loads"):
        render([rate, conc])


def open_loop_case(framework: str, p99s: list[float], knee_at: float | None) -> Case:
    """A constant-rate case: 1,000 req/s steps with whole histograms (every request at
    p50 except 1 % at its p99), the knee where `knee_at` says."""
    steps = []
    for index, p99 in enumerate(p99s):
        rate = 1000.0 * (index + 1)
        values = [0.5] * 990 + [p99] * 10
        encoded = hdr.encode(hdr.histogram_of(v * 1000 for v in values))
        step = make_step(rate, rate, unit="req/s", p99=p99)
        steps.append(
            dataclasses.replace(
                step,
                latency_uncorrected_ms=dict(step.latency_ms),
                histograms={"latency": encoded, "latency_uncorrected": encoded},
            )
        )
    knee = {"offered": knee_at, "p99_ms": p99s[int(knee_at / 1000) - 1]} if knee_at else None
    return make_case(framework, tuple(steps), summary=Summary(peak=1000.0, knee=knee))


def test_open_loop_runs_get_the_knee_and_the_spectrum_at_a_rate_all_held() -> None:
    fast = open_loop_case("aiohttp", [1.0, 1.1, 1.2, 9.0], knee_at=4000)
    slow = open_loop_case("tornado", [1.5, 30.0], knee_at=2000)
    figures = ramp_figures(series_of((fast, slow)))
    knees = lines_by_gid(figures["latency_rate"])
    assert list(knees["knee:aiohttp"].get_xdata()) == [4000]
    assert list(knees["knee:tornado"].get_ydata()) == [30.0]
    spectrum = figures["spectrum"].axes[0]
    assert "2,000 req/s" in spectrum.get_title()  # the highest rate both held
    assert spectrum.get_xscale() == "log"
    lines = lines_by_gid(figures["spectrum"])
    assert {"spectrum:aiohttp", "spectrum:tornado (from actual send)"} <= set(lines)
    xs = list(lines["spectrum:aiohttp"].get_xdata())
    assert xs[0] == pytest.approx(2.0) and xs[-1] == pytest.approx(1000.0)  # 1,000 requests
    plt.close("all")


def test_closed_loop_latency_says_so_and_has_no_spectrum() -> None:
    steps = (make_step(50, 9000), make_step(100, 9500))
    figures = ramp_figures(series_of((make_case("aiohttp", steps),)))
    assert "closed loop" in figures["latency"].get_suptitle()
    assert "spectrum" not in figures and "latency_rate" not in figures
    plt.close("all")


def test_report_has_the_knees_and_the_latency_at_equal_load(tmp_path: Path) -> None:
    cases = (
        open_loop_case("aiohttp", [1.0, 1.1, 1.2, 9.0], knee_at=4000),
        open_loop_case("tornado", [1.5, 30.0], knee_at=2000),
    )
    html = render([write(tmp_path, "open", cases)]).read_text()
    assert "Knees" in html and "Latency at equal load" in html
    assert html.count('src="data:image/png;base64,') == 8  # spectrum and knee figures too
    assert "Percentile spectrum" in html


NINE = ("gevent", "eventlet", "tornado", "twisted", "aiohttp", "nginx", "node-http",
        "node-express", "eventmachine")  # fmt: skip


def test_a_baseline_ten_times_the_rest_gets_a_log_throughput_axis() -> None:
    python = (make_step(50, 9000), make_step(100, 9500))
    nginx = (make_step(50, 150_000), make_step(100, 166_000))
    figures = ramp_figures(series_of((make_case("aiohttp", python), make_case("nginx", nginx))))
    axes = figures["throughput"].axes[0]
    assert axes.get_yscale() == "log"
    low, high = axes.get_ylim()
    assert 0 < low < 9000 and high >= 166_000
    minor = axes.yaxis.get_minor_formatter()
    assert [minor(v, 0) for v in (20_000, 30_000, 50_000)] == ["20,000", "", "50,000"]
    # frameworks within a few times of each other keep a linear axis from 0
    close = ramp_figures(series_of((make_case("aiohttp", python), make_case("gevent", python))))
    assert close["throughput"].axes[0].get_yscale() == "linear"
    assert close["throughput"].axes[0].get_ylim()[0] == 0
    plt.close("all")


def test_a_log_rate_ramp_keeps_the_ideal_line_off_zero() -> None:
    slow = (make_step(1000, 1000, unit="req/s"), make_step(2000, 1900, unit="req/s"))
    fast = (make_step(1000, 1000, unit="req/s"), make_step(20000, 20000, unit="req/s"))
    figures = ramp_figures(series_of((make_case("tornado", slow), make_case("nginx", fast))))
    ideal = lines_by_gid(figures["throughput"])["ideal"]
    assert figures["throughput"].axes[0].get_yscale() == "log"
    assert list(ideal.get_xdata()) == [1000, 20000]
    plt.close("all")


def test_latency_is_split_into_an_average_and_a_p99_panel() -> None:
    steps = (make_step(50, 9000, p99=4.0), make_step(100, 9500, p99=6.0))
    figures = ramp_figures(series_of(tuple(make_case(name, steps) for name in NINE)))
    avg_axes, p99_axes = figures["latency"].axes
    assert (avg_axes.get_title(), p99_axes.get_title()) == ("average", "p99")
    assert {line.get_gid() for line in avg_axes.get_lines()} == {f"{n} avg" for n in NINE}
    assert {line.get_gid() for line in p99_axes.get_lines()} == {f"{n} p99" for n in NINE}
    # one legend entry per framework, in its colour, not one per line
    legend = p99_axes.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == list(NINE)
    assert avg_axes.get_legend() is None
    plt.close("all")


def test_peak_bars_carry_their_intervals() -> None:
    cases = (
        make_case("aiohttp", (make_step(50, 9000),),
                  summary=Summary(peak=9000.0, peak_ci=(8500.0, 9800.0))),
        make_case("gevent", (make_step(50, 4000),), summary=Summary(peak=4000.0)),
    )  # fmt: skip
    axes = ramp_figures(series_of(cases))["peak"].axes[0]
    (segments,) = [c for c in axes.collections if c.get_gid() == "peak-ci"]
    spans = [tuple(segment[:, 1]) for segment in segments.get_segments()]
    assert spans == [(8500.0, 9800.0)]  # gevent: no rounds, no interval
    assert axes.get_ylim()[1] > 9800.0  # the interval's top is inside the plot
    texts = [t.get_text() for t in axes.texts]
    assert texts == ["9,000", "4,000"]
    # without any interval: no error bars, no legend for them
    plain = ramp_figures(series_of((make_case("gevent", (make_step(50, 4000),)),)))["peak"]
    assert not [c for c in plain.axes[0].collections if c.get_gid() == "peak-ci"]
    assert "95 % interval" in axes.get_ylabel() and "interval" not in plain.axes[0].get_ylabel()
    plt.close("all")


def test_report_opens_each_run_with_its_verdict_and_gives_intervals() -> None:
    cases = with_baseline_ratios(
        [
            synthetic_case(
                "aiohttp",
                [10000.0, 10150.0, 9900.0, 10050.0, 9950.0],
                p99_ms=[5.0, 5.5, 4.8, 5.2, 5.1],
            ),
            synthetic_case("twisted", [10020.0, 10100.0, 9950.0, 10000.0, 9990.0]),
            synthetic_case("nginx", [80000.0, 81000.0, 79000.0, 80500.0, 79500.0]),
        ],
        {"nginx": "baseline"},
    )
    run = synthetic_run("r1", cases)
    run = dataclasses.replace(run, verdict=verdict(cases))
    html = render_html([run], {})
    section = html[html.index("<h2>Run r1</h2>") :]
    assert section.index('class="verdict"') < section.index("<h3>Summary</h3>")
    assert run.verdict and escape(run.verdict["text"]) in section
    assert "aiohttp ≈ twisted" in section or "twisted ≈ aiohttp" in section
    assert "nginx / " in section and "(a tie)" in section  # neighbour ratios, with intervals
    aiohttp = next(c for c in cases if c.framework == "aiohttp").summary
    assert aiohttp.peak_ci and aiohttp.ratio_to_nginx_ci and aiohttp.p99_at_peak_ci_ms
    low, high = aiohttp.peak_ci
    assert f'<span class="ci">[{low:,.0f}, {high:,.0f}]</span>' in section
    low, high = aiohttp.ratio_to_nginx_ci
    assert f'<span class="ci">[{low:.2f}, {high:.2f}]</span>' in section
    low, high = aiohttp.p99_at_peak_ci_ms
    assert f'<span class="ci">[{low:.2f}, {high:.2f}]</span>' in section


def test_a_run_without_a_verdict_has_no_verdict_box(tmp_path: Path) -> None:
    html = render([write(tmp_path, "old", (make_case("aiohttp", (make_step(50, 9000),)),))])
    assert 'class="verdict"' not in html.read_text()


def test_peak_bars_show_each_rounds_peak_as_a_dot_kept_out_rounds_hollow() -> None:
    rounds = tuple(
        dataclasses.replace(make_step(50, peak), figures=StepFigures(round=i))
        for i, peak in enumerate((9000.0, 9400.0, 12500.0))
    )
    summary = Summary(
        peak=9200.0,
        peak_ci=(8000.0, 10400.0),
        rounds=3,
        rounds_excluded=({"round": 2, "reason": "contended: ..."},),
    )
    measured = dataclasses.replace(
        make_case("aiohttp", (make_step(50, 9000),), summary=summary), rounds=rounds
    )
    cases = (measured, make_case("gevent", (make_step(50, 4000),), summary=Summary(peak=4000.0)))
    axes = ramp_figures(series_of(cases))["peak"].axes[0]
    (kept,) = [c for c in axes.collections if c.get_gid() == "round-peaks"]
    (out,) = [c for c in axes.collections if c.get_gid() == "round-peaks-excluded"]
    assert sorted(kept.get_offsets()[:, 1]) == [9000.0, 9400.0]
    assert list(out.get_offsets()[:, 1]) == [12500.0]
    assert axes.get_ylim()[1] > 12500.0 and "dots: each round" in axes.get_ylabel()
    plt.close("all")


def test_the_report_says_each_cases_precision_and_why_one_stopped_short() -> None:
    from charts.report_sections import precision_html

    imprecise = Summary(
        peak=4000.0,
        rounds=9,
        half_width_pct=7.25,
        precision_pct=5.0,
        round_duration_s=8.0,
        imprecise_reason="±7.2 % after 9 rounds, asked ±5 %",
        noise_source="server",
        noise_note="the server's own variation: its per-second replies wander ±9.0 %",
        rounds_excluded=({"round": 3, "reason": "contended: other processes"},),
        flags=("imprecise",),
    )
    precise = Summary(peak=9000.0, rounds=4, half_width_pct=2.1, precision_pct=5.0)
    run = Run(
        "r1", "2026-12-01T00:00:00Z", None, {}, {}, {},
        (make_case("gevent", (make_step(50, 4000),), summary=imprecise),
         make_case("nginx", (make_step(50, 9000),), summary=precise)),
    )  # fmt: skip
    html = precision_html(run)
    assert '<span class="failed">imprecise: ±7.2 % after 9 rounds, asked ±5 %</span>' in html
    assert "wander ±9.0 %" in html and "round 4: contended" in html
    assert "within ±5 %" in html and "±2.1" in html
    assert precision_html(dataclasses.replace(run, cases=())) == ""


def test_the_efficiency_figure_draws_cpu_per_reply_with_its_interval() -> None:
    """One bar per case that measured its CPU per reply (µs), the interval as error bars,
    replies per CPU-second above; no figure at all when no case measured it."""
    measured = []
    for name, cost, interval in (("aiohttp", 50.0, (45.0, 56.0)), ("gevent", 125.0, None)):
        case = make_case(name, (make_step(50, 9000),))
        summary = dataclasses.replace(case.summary, cpu_us_per_req=cost, cpu_us_per_req_ci=interval)
        measured.append(dataclasses.replace(case, summary=summary))
    unmeasured = make_case("twisted", (make_step(50, 5000),))
    figure = ramp_figures(series_of((*measured, unmeasured)))["efficiency"]
    axes = figure.axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["aiohttp", "gevent"]
    assert [round(p.get_height()) for p in axes.patches] == [50, 125]
    assert {t.get_text() for t in axes.texts} == {"20,000/s", "8,000/s"}
    assert len(axes.collections) == 1  # one error bar: gevent had no rounds
    assert "efficiency" not in ramp_figures(series_of((unmeasured,)))
    plt.close("all")


def test_cpu_per_reply_is_given_as_a_ratio_to_nginxs() -> None:
    cases = []
    for name, cost in (("nginx", 20.0), ("aiohttp", 50.0), ("gevent", None)):
        case = make_case(name, (make_step(50, 9000),))
        cases.append(
            dataclasses.replace(
                case, summary=dataclasses.replace(case.summary, cpu_us_per_req=cost)
            )
        )
    rated = with_baseline_ratios(cases, {"nginx": "baseline"})
    assert [c.summary.cpu_ratio_to_nginx for c in rated] == [1.0, 2.5, None]


THIRTEEN = ["gevent", "eventlet", "tornado", "twisted", "aiohttp", "nginx", "node-http",
            "node-express", "eventmachine", "gunicorn-gevent", "hypercorn", "uvicorn",
            "granian"]  # fmt: skip


def test_every_server_of_a_run_gets_its_own_colour_and_marker() -> None:
    """13 servers (9 with fixed colours, 4 given as commands): 13 colours and 13 looks;
    the frameworks keep their fixed colours; past every colour, the pairs stay apart."""
    looks = palette(THIRTEEN)
    assert len({look.colour for look in looks.values()}) == len(THIRTEEN)
    assert len(set(looks.values())) == len(THIRTEEN)
    assert all(looks[name].colour == colour_for(name) for name in THIRTEEN[:9])
    assert looks["gunicorn-gevent"].colour != looks["hypercorn"].colour
    assert palette(reversed(THIRTEEN)) == looks  # the same run draws the same way
    many = [f"server-{index}" for index in range(60)]
    assert len(set(palette(many).values())) == 60


def test_a_runs_series_are_drawn_apart(tmp_path: Path) -> None:
    cases = tuple(make_case(name, (make_step(50, 1000 + i),)) for i, name in enumerate(THIRTEEN))
    series = build_series([Run("r1", "2026-12-01T00:00:00Z", None, {}, {}, {}, cases)])
    assert len({(one.colour, one.marker) for one in series}) == len(THIRTEEN)
    axes = ramp_figures(series)["throughput"].axes[0]
    drawn = {
        (line.get_color(), line.get_marker()) for line in axes.lines if line.get_gid() in THIRTEEN
    }
    assert len(drawn) == len(THIRTEEN)
    plt.close("all")


def test_every_ramp_kind_names_its_figures_and_each_has_a_builder_and_a_caption() -> None:
    from charts.figure_kinds import FIGURES_BY_RAMP_KIND, ramp_kind
    from charts.figures import FIGURE_BUILDERS
    from charts.report import FIGURE_CAPTIONS
    from model.ramps import RAMP_KINDS

    assert set(FIGURES_BY_RAMP_KIND) == set(RAMP_KINDS)
    named = {name for names in FIGURES_BY_RAMP_KIND.values() for name in names}
    assert named == set(FIGURE_BUILDERS)
    # a builder's name is its figure's, but for the connection ramp's four
    assert named - {"connections"} <= set(FIGURE_CAPTIONS)
    assert {"conn_cpu", "conn_rss", "conn_rss_per_connection", "conn_tick_max"} <= set(
        FIGURE_CAPTIONS
    )
    rate = make_case("gevent", (make_step(50, 50, unit="req/s"),))
    assert ramp_kind([rate]) == "rate" and ramp_kind([make_case("gevent", ())]) == "concurrency"

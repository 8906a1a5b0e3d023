"""The samplers' outputs folded (model.stacks) and split by category (model.cpu_split), on
profiles captured here: py-spy's raw output of aiohttp and `perf script` of nginx, each
at its peak in a smoke run with --cpu-profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from charts.cpu_tables import CPU_SPLIT, top_frames_spec
from model.cpu_split import (
    CATEGORIES,
    cpu_parts_us,
    sampled_us_per_req,
    source_category,
    split_stacks,
    stack_category,
)
from model.results import Case, Run, Summary
from model.stacks import (
    fold_perf_script,
    folded_text,
    leaf_frames,
    parse_folded,
    parse_pyspy_raw,
    total_samples,
)

DATA = Path(__file__).parent.parent / "data"
PYSPY_RAW = (DATA / "pyspy_raw_aiohttp.txt").read_text()
PERF_SCRIPT = (DATA / "perf_script_nginx.txt").read_text()


def test_pyspy_raw_is_read_without_its_process_frame() -> None:
    folded = parse_pyspy_raw(PYSPY_RAW)
    assert total_samples(folded) == sum(
        int(line.rsplit(" ", 1)[1]) for line in PYSPY_RAW.splitlines()
    )
    assert not any(stack.startswith("process ") for stack in folded)
    assert any("aiohttp/web_protocol.py" in stack for stack in folded)


def test_a_command_line_over_several_lines_is_one_process_frame() -> None:
    text = 'process 7:"python -c \nimport x;x.run()";main (app.py:3);work (app.py:9) 5\n'
    assert parse_pyspy_raw(text) == {"main (app.py:3);work (app.py:9)": 5}


def test_perf_script_is_folded_root_first_one_sample_each() -> None:
    folded = fold_perf_script(PERF_SCRIPT)
    samples = sum(1 for line in PERF_SCRIPT.splitlines() if " cpu-clock:" in line)
    assert total_samples(folded) == samples
    leaves = leaf_frames(folded)
    assert any(leaf.endswith("([kernel.kallsyms])") for leaf in leaves)
    # the root is the process's start, the leaf where the CPU was
    assert all(";" not in stack or "kallsyms" not in stack.split(";")[0] for stack in folded)


def test_folded_text_round_trips() -> None:
    folded = fold_perf_script(PERF_SCRIPT)
    assert parse_folded(folded_text(folded)) == folded


def test_nginx_is_mostly_kernel_then_its_own_code() -> None:
    split = split_stacks(fold_perf_script(PERF_SCRIPT), "nginx")
    shares = split.shares()
    assert shares["kernel"] > 0.5
    assert shares["framework"] > 0.0  # ngx_* in /usr/sbin/nginx
    assert shares["handler"] == 0.0
    assert split.idle_samples == 0  # perf's cpu-clock samples only what runs


def test_aiohttp_splits_into_kernel_framework_runtime_and_handler() -> None:
    split = split_stacks(parse_pyspy_raw(PYSPY_RAW), "aiohttp")
    shares = split.shares()
    for category in ("kernel", "framework", "runtime", "handler"):
        assert shares[category] > 0, category
    assert split.idle_samples > 0  # epoll_wait leaves py-spy counted: left out
    top = split.top_frames(5)
    assert top[0]["category"] == "kernel"  # send/recv in libc: the system calls
    assert all(":" not in frame["frame"].rsplit("(", 1)[1] for frame in top)  # no line numbers


def test_parts_sum_to_the_measured_figure() -> None:
    split = split_stacks(parse_pyspy_raw(PYSPY_RAW), "aiohttp")
    parts = cpu_parts_us(split, 49.1)
    assert set(parts) == set(CATEGORIES)
    assert sum(parts.values()) == pytest.approx(49.1, abs=0.05)


def test_sampled_figure_is_samples_times_period_over_replies() -> None:
    split = split_stacks({"a ([kernel.kallsyms])": 99}, "nginx")
    assert sampled_us_per_req(split, sample_period_s=1 / 99, replies=1000) == 1000.0
    assert sampled_us_per_req(split, sample_period_s=1 / 99, replies=0) is None


@pytest.mark.parametrize(
    ("path", "framework", "category"),
    [
        ("aiohttp/web_protocol.py:446", "aiohttp", "framework"),
        ("asyncio/base_events.py:1907", "aiohttp", "runtime"),
        ("servers/frameworks/aiohttp.py:40", "aiohttp", "handler"),
        ("/work/x/servers/core/sinks.py:12", "gevent", "handler"),
        ("/venv/lib/python3.11/site-packages/gevent/hub.py:3", "gevent", "runtime"),
        ("/venv/lib/python3.11/site-packages/gevent/pywsgi.py:3", "gevent", "framework"),
        ("twisted/internet/epollreactor.py:3", "twisted", "runtime"),
        ("twisted/web/http.py:3", "twisted", "framework"),
        ("/usr/lib/python3.11/selectors.py:468", "tornado", "runtime"),
        ("<frozen runpy>:88", "tornado", "runtime"),
        ("psutil/_common.py:682", "aiohttp", "other"),
        ("servers/runtimes/green/eventlet_hub.py:25", "eventlet", "runtime"),
        ("/work/x/servers/runtimes/twisted/reactor.py:40", "twisted", "runtime"),
        ("servers/runtimes/green/app.py:25", "eventlet", "handler"),
    ],
)
def test_source_rules(path: str, framework: str, category: str) -> None:
    assert source_category(path, framework) == category


@pytest.mark.parametrize(
    ("stack", "category"),
    [
        ("main (servers/x.py:1);handle (servers/x.py:9);send (libc.so.6)", "kernel"),
        (
            "main (servers/x.py:1);_run_once (asyncio/base_events.py:1);epoll_wait (libc.so.6)",
            "idle",
        ),
        ("main (servers/x.py:1);dumps (json/__init__.py:2);encode (_json.c:4)", "runtime"),
        ("main (servers/x.py:1);handle (servers/x.py:9);Py_DECREF (object.h:537)", "handler"),
        (
            "run (servers/x.py:1);task_step (_asynciomodule.c:2990);Py_DECREF (object.h:5)",
            "runtime",
        ),
        ("main (/usr/sbin/nginx);ngx_http_parse_request_line (/usr/sbin/nginx)", "framework"),
        ("start (node);Builtins_Call (node)", "runtime"),
        ("main (/usr/sbin/nginx);SSL_read (libssl.so.3)", "other"),
    ],
)
def test_stack_rules(stack: str, category: str) -> None:
    assert stack_category(stack, "aiohttp")[0] == category


def _profiled_case(framework: str, folded: dict[str, int], error: str | None = None) -> Case:
    """A case with a profiled round's record, as harness.run.profiled writes it."""
    split = split_stacks(folded, framework)
    record = {
        "sampler": "perf",
        "error": error,
        "cpu_us_per_req": 9.6,
        "split_of_us_per_req": 8.1,
        "parts_us": cpu_parts_us(split, 8.1),
        "parts_sum_us": round(sum(cpu_parts_us(split, 8.1).values()), 2),
        "sampled_cpu_us_per_req": 9.28,
        "sampled_vs_measured_pct": -3.3,
        "sampler_cpu_us_per_req": 2.1,
        "achieved": 42000.0,
        "top_frames": split.top_frames(3),
    }
    summary = Summary(peak=60000.0, cpu_us_per_req=8.1, cpu_profile=record)
    return Case(framework, "text", "none", "wrk", "single", {"mode": "both"}, "ok", summary=summary)


def test_split_table_renders_the_parts_their_sum_and_the_sampler() -> None:
    case = _profiled_case("nginx", fold_perf_script(PERF_SCRIPT))
    plain = Case("aiohttp", "text", "none", "wrk", "single", {"mode": "both"}, "ok")
    rendered = CPU_SPLIT.render([case, plain], "bracketed")
    assert [row[0].text for row in rendered.cells] == ["nginx"]  # the profiled case only
    row = dict(zip(rendered.headers, (c.joined for c in rendered.cells[0]), strict=True))
    assert row["sum (diff)"].startswith("8.1")
    assert row["sampled µs/req"] == "9.28 of 9.6 (-3 %)"
    assert row["round/peak"] == "42,000 (0.70× peak)"
    assert "not sampled" not in rendered.headers
    failed = _profiled_case("nginx", {}, error="perf could not attach: no such process")
    rendered = CPU_SPLIT.render([failed], "compact")
    assert rendered.cells[0][-1].joined == "perf could not attach: no such process"


def test_top_frames_table_lists_the_deciding_frames() -> None:
    case = _profiled_case("nginx", fold_perf_script(PERF_SCRIPT))
    top = case.summary.cpu_profile["top_frames"]
    rendered = top_frames_spec(case, 2).render(top, "compact")
    assert len(rendered.cells) == 2
    assert rendered.cells[0][0].text == top[0]["frame"]


def test_report_section_draws_a_bar_per_server_without_fetching_anything() -> None:
    from charts.cpu_report import CATEGORY_COLOURS, cpu_profile_html
    from charts.report import html_table

    nginx = _profiled_case("nginx", fold_perf_script(PERF_SCRIPT))
    aiohttp = _profiled_case("aiohttp", parse_pyspy_raw(PYSPY_RAW))
    run = Run("r", "now", None, {}, {}, {}, (aiohttp, nginx))
    html = cpu_profile_html(run, html_table)
    assert html.count('<rect x="150.0"') == 2  # each bar starts at the label's edge
    for category in ("kernel", "framework", "runtime", "handler"):
        assert f'fill="{CATEGORY_COLOURS[category]}"><title>aiohttp {category}' in html
    assert "top frames" in html
    assert "http://" not in html and "https://" not in html
    empty = Run("r", "now", None, {}, {}, {}, ())
    assert cpu_profile_html(empty, html_table) == ""


def test_flame_graph_is_one_svg_each_frame_as_wide_as_its_samples() -> None:
    from charts.flame import COLOURS, WIDTH_PX, flame_svg

    folded = {"main (servers/x.py:1);spin (servers/x.py:9)": 3, "main (servers/x.py:1)": 1}
    svg = flame_svg(folded, "spin", "spin")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert f'width="{WIDTH_PX:.2f}"' in svg  # the root and main: every sample
    assert f'width="{WIDTH_PX * 3 / 4:.2f}"' in svg  # spin: three of four
    assert "spin (servers/x.py:9) — 3 samples, 75.0 %" in svg
    assert COLOURS["handler"] in svg
    assert "<script" not in svg and "http" not in svg.replace("http://www.w3.org", "")
    assert flame_svg({}, "spin") == ""
    real = flame_svg(fold_perf_script(PERF_SCRIPT), "nginx", "nginx")
    assert COLOURS["kernel"] in real and COLOURS["framework"] in real


def test_diff_says_where_cpu_per_request_moved() -> None:
    from charts.cpu_tables import CPU_MOVES, run_cpu_moves

    nginx = _profiled_case("nginx", fold_perf_script(PERF_SCRIPT))
    record = dict(nginx.summary.cpu_profile)
    record["parts_us"] = {**record["parts_us"], "kernel": record["parts_us"]["kernel"] + 2.0}
    record["split_of_us_per_req"] = 10.1
    later = Case(
        "nginx", "text", "none", "wrk", "single", {"mode": "both"}, "ok",
        summary=Summary(peak=50000.0, cpu_us_per_req=10.1, cpu_profile=record),
    )  # fmt: skip
    moves = run_cpu_moves(
        Run("a", "t", None, {}, {}, {}, (nginx,)), Run("b", "t", None, {}, {}, {}, (later,))
    )
    by_what = {(m.kind, m.what): m for m in moves}
    assert by_what["category", "kernel"].delta_us == 2.0
    assert by_what["category", "handler"].delta_us == 0.0
    frames = [m for m in moves if m.kind == "frame"]
    assert frames and all(m.delta_us > 0 for m in frames)  # same shares of more µs
    rendered = CPU_MOVES.render(moves, "compact")
    assert rendered.cells[0][1].text == "kernel" and rendered.cells[0][4].text == "+2.00"
    assert (
        run_cpu_moves(
            Run("a", "t", None, {}, {}, {}, (nginx,)), Run("b", "t", None, {}, {}, {}, ())
        )
        == []
    )


def test_cpu_profile_is_planned_for_ramps_with_a_peak_round_only() -> None:
    import dataclasses

    from harness.compare import cpu_profile_choice
    from harness.profile import load_profile

    smoke = load_profile("smoke", {})
    assert cpu_profile_choice(False, smoke) == (False, None)
    asked, note = cpu_profile_choice(True, smoke)
    assert asked and note is not None and "kept out of the intervals" in note
    held = dataclasses.replace(smoke, ramp=smoke.connection_ramp)
    asked, note = cpu_profile_choice(True, held)
    assert not asked and note is not None and "not sampled" in note


def test_libc_is_the_kernel_only_for_a_sampler_blind_to_the_kernel() -> None:
    malloc = "main (/usr/sbin/nginx);_int_malloc (/usr/lib/x86_64-linux-gnu/libc.so.6)"
    assert stack_category(malloc, "nginx", kernel_frames=True)[0] == "other"
    send = "main (/usr/sbin/nginx);send (libc.so.6);tcp_sendmsg ([kernel.kallsyms])"
    assert stack_category(send, "nginx", kernel_frames=True)[0] == "kernel"
    assert stack_category("handle (servers/x.py:3);send (libc.so.6)", "x")[0] == "kernel"


def test_a_thread_asleep_in_a_lock_is_idle_whatever_libc_prints() -> None:
    waiting = (
        "run (gevent/threadpool.py:216);acquire_with_timeout (gevent/_threading.py:36);"
        "lock_PyThread_acquire_lock (libpython3.11.so.1.0);"
        "PyThread_acquire_lock_timed (libpython3.11.so.1.0);0x7fe0f12ae116 (libc.so.6);"
        "0x7fe0f12a3f16 (libc.so.6)"
    )
    assert stack_category(waiting, "gevent")[0] == "idle"


def test_a_round_the_sampler_slowed_says_so() -> None:
    from harness.run.profiled import slowed_note

    assert slowed_note(619.0, 3704.8) == (
        "the sampled round ran at 0.17× the peak: the sampler slowed it"
    )
    assert slowed_note(7770.0, 8858.0) is None
    assert slowed_note(None, 8858.0) is None


def test_bench_split_table_has_a_row_per_app_of_each_profiled_case() -> None:
    from charts.cpu_tables import BENCH_CPU_SPLIT, bench_profiles
    from model.bench import BenchCase, BenchFigure

    record = _profiled_case("aiohttp", parse_pyspy_raw(PYSPY_RAW)).summary.cpu_profile
    figure = BenchFigure("req_per_s", "higher", 0.95, (900.0,), (1000.0,), 0.9, None, "within")
    profiled = BenchCase(
        "aiohttp", None, "h1", 1, (figure,), {"cpu_profile": {"ours": record, "minimal": record}}
    )
    plain = BenchCase("tornado", None, "h1", 1, (figure,))
    rendered = BENCH_CPU_SPLIT.render(bench_profiles([profiled, plain]), "compact")
    assert [(row[0].text, row[1].text) for row in rendered.cells] == [
        ("aiohttp", "ours"),
        ("aiohttp", "minimal"),
    ]
    row = dict(zip(rendered.headers, (c.joined for c in rendered.cells[0]), strict=True))
    assert row["CPU µs/req"] == "8.1" and row["sum (diff)"].startswith("8.1")
    assert row["sampled µs/req"] == "9.28 (-3 %)"


def test_the_samples_py_spy_could_not_read_are_counted_over_its_runs() -> None:
    from harness.cpu_sampler import pyspy_lost

    ended = (
        "py-spy> Sampling process 99 times a second. Press Control-C to exit.\n\n"
        "py-spy> Stopped sampling because Control-C pressed\n"
        "py-spy> Wrote raw flamegraph data to '/x/py-spy-7.txt'. Samples: {} Errors: {}\n"
    )
    assert pyspy_lost([ended.format(237, 91), ended.format(63, 0)]) == (
        "91 of 300 samples could not be read"
    )
    assert pyspy_lost([ended.format(363, 0)]) is None
    assert pyspy_lost(["Error: No python processes found in process 7"]) is None

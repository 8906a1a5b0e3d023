"""--cpu-profile's tables (summary.cpu_profile, harness.run.profiled): where each case's
CPU µs per request go (CPU_SPLIT), and the frames that took most of it (top_frames_spec).
Rendered by every output as the other tables (charts.columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from charts.columns import Column, Style, TableSpec
from model.bench import BenchCase
from model.cpu_split import CATEGORIES, CpuMove, cpu_moves
from model.figures import figure
from model.results import Case, Run

PROFILED_CAPTION = (
    "split of each case's CPU µs/request by its profiled round's samples (one more round "
    "at the peak, kept out of the intervals); sampled: the CPU the samples account for "
    "against the round's measured (perf's cpu-clock counts CPU time; py-spy counts a "
    "thread that is not waiting, runnable ones too); sampler: its own CPU per request"
)


def profiled(cases: Sequence[Case]) -> list[Case]:
    """The cases with a profiled round."""
    return [c for c in cases if c.summary.cpu_profile is not None]


def _read(key: str) -> Any:
    return lambda case: (case.summary.cpu_profile or {}).get(key)


def _part(category: str) -> Column[Case]:
    return Column(
        category,
        value=lambda case: ((case.summary.cpu_profile or {}).get("parts_us") or {}).get(category),
        format=lambda v, style: figure(v),
        numeric=True,
    )


def _server(case: Case) -> str:
    return case.framework + (f" {case.protocol}" if case.protocol != "h1" else "")


def _sum_text(profile: dict[str, Any], style: Style) -> str:
    total, of = profile.get("parts_sum_us"), profile.get("split_of_us_per_req")
    if total is None or not of:
        return "–"
    return f"{figure(total)} ({100 * (total - of) / of:+.1f} %)"


def _sampled_text(profile: dict[str, Any], style: Style) -> str:
    sampled, measured = profile.get("sampled_cpu_us_per_req"), profile.get("cpu_us_per_req")
    if sampled is None:
        return "–"
    difference = f"({profile['sampled_vs_measured_pct']:+.0f} %)"
    if style == "compact":
        return f"{figure(sampled)} {difference}"
    return f"{figure(sampled)} of {figure(measured)} {difference}"


def _round_text(case: Case, style: Style) -> str:
    achieved = (case.summary.cpu_profile or {}).get("achieved")
    if achieved is None or not case.summary.peak:
        return "–"
    ratio = f"{achieved / case.summary.peak:.2f}×"
    return ratio if style == "compact" else f"{figure(achieved)} ({ratio} peak)"


CPU_SPLIT = TableSpec[Case](
    title="CPU per request: where the µs go (profiled round at the peak)",
    rows=profiled,
    columns=(
        Column("server", value=_server),
        Column("sampler", value=_read("sampler")),
        Column(
            "CPU µs/req",
            value=_read("split_of_us_per_req"),
            format=lambda v, s: figure(v),
            numeric=True,
        ),
        *(_part(category) for category in CATEGORIES),
        Column("sum (diff)", value=lambda c: c.summary.cpu_profile, format=_sum_text, numeric=True),
        Column(
            "sampled µs/req",
            value=lambda c: c.summary.cpu_profile,
            format=_sampled_text,
            numeric=True,
        ),
        Column(
            "sampler µs/req",
            value=_read("sampler_cpu_us_per_req"),
            format=lambda v, s: figure(v),
            numeric=True,
        ),
        Column("round/peak", value=lambda c: c, format=_round_text, numeric=True),
        Column(
            "not sampled",
            value=lambda c: _read("error")(c) or "",
            shown=lambda rows: any(_read("error")(c) for c in rows),
            wraps=True,
        ),
    ),
)


def top_frames_spec(case: Case, count: int = 10) -> TableSpec[dict[str, Any]]:
    """The frames that decided most of `case`'s samples (model.cpu_split), one table."""
    return TableSpec[dict[str, Any]](
        title=f"{_server(case)}: top frames",
        rows=lambda rows: list(rows)[:count],
        columns=(
            Column("frame", value=lambda r: r["frame"], wraps=True),
            Column("category", value=lambda r: r["category"]),
            Column("share", value=lambda r: f"{100 * r['share']:.1f} %", numeric=True),
        ),
    )


def run_cpu_moves(a: Run, b: Run) -> list[CpuMove]:
    """Where CPU per request moved, for each case profiled in both runs (by case key)."""
    in_b = {case.key: case for case in b.cases if case.summary.cpu_profile}
    return [
        move
        for case in a.cases
        if case.summary.cpu_profile and case.key in in_b
        for move in cpu_moves(
            case.key, case.summary.cpu_profile, in_b[case.key].summary.cpu_profile or {}
        )
    ]


def _us(read: Any) -> Any:
    return {"value": read, "format": lambda v, style: figure(v), "numeric": True}


CPU_MOVES = TableSpec[CpuMove](
    title="where CPU per request moved (profiled rounds, µs/req)",
    columns=(
        Column("case", value=lambda m: m.case.split("_", 1)[0]),
        Column("category or frame", value=lambda m: m.what, wraps=True),
        Column("A", **_us(lambda m: m.a_us)),
        Column("B", **_us(lambda m: m.b_us)),
        Column("B − A", value=lambda m: m.delta_us, format=lambda v, s: f"{v:+,.2f}", numeric=True),
    ),
)


BENCH_PROFILED_CAPTION = (
    "split of each app's CPU µs/request (its process tree's CPU over the replies of one "
    "more run after the rounds, sampled, kept out of the ratio); sampled and sampler as "
    "in compare's table"
)


def bench_profiles(cases: Sequence[BenchCase]) -> list[dict[str, Any]]:
    """`harness bench http --cpu-profile`'s records, one row per app: the record with the
    server (`server`) and the app (`app`: ours, minimal)."""
    return [
        {**record, "server": _bench_server(case), "app": app}
        for case in cases
        for app, record in (case.details.get("cpu_profile") or {}).items()
    ]


def _bench_server(case: BenchCase) -> str:
    return case.framework + (f" {case.protocol}" if case.protocol != "h1" else "")


def _bench_part(category: str) -> Column[dict[str, Any]]:
    return Column(
        category,
        value=lambda row: (row.get("parts_us") or {}).get(category),
        format=lambda v, style: figure(v),
        numeric=True,
    )


BENCH_CPU_SPLIT = TableSpec[dict[str, Any]](
    title="CPU per request: where the µs go (one sampled run of each app)",
    columns=(
        Column("server", value=lambda row: row["server"]),
        Column("app", value=lambda row: row["app"]),
        Column("sampler", value=lambda row: row.get("sampler")),
        Column("CPU µs/req", **_us(lambda row: row.get("split_of_us_per_req"))),
        *(_bench_part(category) for category in CATEGORIES),
        Column("sum (diff)", value=lambda row: row, format=_sum_text, numeric=True),
        Column("sampled µs/req", value=lambda row: row, format=_sampled_text, numeric=True),
        Column("sampler µs/req", **_us(lambda row: row.get("sampler_cpu_us_per_req"))),
        Column("req/s", **_us(lambda row: row.get("achieved"))),
        Column(
            "not sampled",
            value=lambda row: row.get("error") or "",
            shown=lambda rows: any(row.get("error") for row in rows),
            wraps=True,
        ),
    ),
)

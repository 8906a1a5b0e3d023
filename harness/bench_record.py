"""A bench's results directory: `harness bench http` and `harness bench ws` keep what they
measured as a run of their own kind (model.bench, schema harness.bench/1) under the
results root, beside compare's runs, so that history, diff, trend and publish see it.

The run's directory is claimed as compare claims its own (harness.run.claim_run_dir: an
exclusive mkdir, `<UTC start>-bench` or `-bench-ws`); its run.json is written when the
bench starts (`running`), after each case, and at the end (`complete`, or `interrupted` /
`failed` with the reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.doctor import host_facts
from harness.fleet.facts import harness_version
from harness.run import claim_run_dir
from harness.run.plan import now_iso
from model.bench import (
    BENCH_PROFILES,
    BenchCase,
    BenchFigure,
    BenchRun,
    judge,
    write_bench_run,
)
from servers import FRAMEWORKS
from servers.contract import PROTOCOL_H1

if TYPE_CHECKING:
    from harness.bench import BenchResult
    from harness.bench_ws import WsBenchResult, WsRatio

# ours at least this share of the minimal app's req/s (HTTP); the WebSocket bench's limit
# is harness.bench_ws.RATIO_LIMIT (ours at most 1.25× the minimal server's cost)
HTTP_RATIO_LIMIT = 0.95
HTTP_FIGURE = "req/s"
WS_FIGURES = ("KB/conn", "RSS KB/conn", "CPU µs/conn")


def _loop(result: BenchResult | WsBenchResult) -> str | None:
    """The loop that ran: the one asked for, else the framework's first (its default)."""
    loops = FRAMEWORKS[result.framework].loops
    return result.loop or (loops[0] if loops else None)


def http_case(result: BenchResult) -> BenchCase:
    """A `harness bench http` result as a bench case: one figure, req/s, judged ≥ 0.95×."""
    verdict, reason = judge(result.ratio_ci, HTTP_RATIO_LIMIT, "higher")
    figure = BenchFigure(
        name=HTTP_FIGURE,
        better="higher",
        limit=HTTP_RATIO_LIMIT,
        ours=result.ours_per_round,
        minimal=result.minimal_per_round,
        ratio=round(result.ratio, 4),
        ratio_ci=result.ratio_ci,
        verdict=verdict,
        reason=reason,
    )
    details = {
        "ours_requests_per_s": round(result.ours_requests_per_s, 1),
        "minimal_requests_per_s": round(result.minimal_requests_per_s, 1),
        "precision_pct": result.precision_pct,
        "half_width_pct": result.half_width_pct,
        "imprecise_reason": result.imprecise_reason,
    }
    if result.cpu_profile is not None:  # --cpu-profile: each app's sampled run, by app
        details["cpu_profile"] = result.cpu_profile
    return BenchCase(
        result.framework, result.loop, result.protocol, result.rounds, (figure,), details
    )


def _ws_figure(
    name: str, ratio: WsRatio, ours: list[float | None], minimal: list[float | None]
) -> BenchFigure:
    from harness.bench_ws import RATIO_LIMIT

    # the ws bench says `above` where the model says `outside` (the same: over the limit)
    verdict = "outside" if ratio.verdict == "above" else ratio.verdict
    return BenchFigure(
        name=name, better="lower", limit=RATIO_LIMIT, ours=tuple(ours), minimal=tuple(minimal),
        ratio=ratio.ratio, ratio_ci=ratio.ci, verdict=verdict, reason=ratio.reason,
    )  # fmt: skip


def ws_case(result: WsBenchResult) -> BenchCase:
    """A `harness bench ws` result as a bench case: KB per connection (the verdict's
    memory figure), RSS KB per connection (its cross-check) and CPU µs per opened
    connection, each judged ≤ 1.25×."""
    ours, minimal = result.ours_runs, result.minimal_runs
    memory_of = "kb_per_connection" if result.memory_source == "cgroup" else "rss_kb_per_connection"
    columns = (memory_of, "rss_kb_per_connection", "cpu_us_per_connection")
    ratios = (result.memory, result.rss, result.cpu)
    figures = tuple(
        _ws_figure(
            name, ratio, [getattr(r, column) for r in ours], [getattr(r, column) for r in minimal]
        )
        for name, column, ratio in zip(WS_FIGURES, columns, ratios, strict=True)
    )
    details = {
        "connections": result.connections,
        "server_processes": result.server_processes,
        "memory_source": result.memory_source,
        "cpu_source": result.cpu_source,
        "held_min": {"ours": result.ours_held_min, "minimal": result.minimal_held_min},
        "failed": result.failed,
        "failed_reasons": result.failed_reasons,
        "load": result.load,
        "note": result.note,
    }
    return BenchCase(result.framework, _loop(result), PROTOCOL_H1, result.rounds, figures, details)


def bench_versions(frameworks: list[str], tools: tuple[str, ...]) -> dict[str, Any]:
    """What compare records of versions, for a bench: Python, the harness, each
    framework's packages and the tools that ran."""
    from harness.tools import TOOLS, tool_status

    return {
        "python": host_facts()["python"],
        "harness": harness_version(),
        "frameworks": {name: FRAMEWORKS[name].versions() for name in frameworks},
        "tools": {name: tool_status(TOOLS[name]).version for name in tools if name in TOOLS},
    }


class BenchRecorder:
    """A bench's results directory and its run.json, rewritten as the cases come in."""

    def __init__(
        self, results_dir: Path, kind: str, config: dict[str, Any], frameworks: list[str]
    ) -> None:
        self.run_id, self.directory = claim_run_dir(results_dir, BENCH_PROFILES[kind])
        tools = ("wrk", "taskset") if kind == "http" else ("taskset",)
        self.run = BenchRun(
            kind=kind,
            run_id=self.run_id,
            started=now_iso(),
            finished=None,
            host=host_facts(),
            versions=bench_versions(frameworks, tools),
            config=config,
            status="running",
        )
        write_bench_run(self.run, self.directory)

    def add(self, case: BenchCase) -> None:
        """Keep one more case (run.json rewritten)."""
        self.run = dataclasses.replace(self.run, cases=(*self.run.cases, case))
        write_bench_run(self.run, self.directory)

    def end(self, status: str, reason: str | None = None) -> Path:
        """The bench ended (`complete`, `interrupted`, `failed`): run.json says so."""
        self.run = dataclasses.replace(
            self.run, finished=now_iso(), status=status, status_reason=reason
        )
        return write_bench_run(self.run, self.directory)


@contextlib.contextmanager
def recording(
    results_dir: Path, kind: str, config: dict[str, Any], frameworks: list[str]
) -> Iterator[BenchRecorder]:
    """A BenchRecorder for the block; run.json ends `complete`, or `interrupted` (Ctrl-C,
    a signal) or `failed` (the error's first line) when the block raises."""
    recorder = BenchRecorder(results_dir, kind, config, frameworks)
    try:
        yield recorder
    except KeyboardInterrupt:
        recorder.end("interrupted", "stopped by a signal (Ctrl-C, SIGTERM or SIGHUP)")
        raise
    except Exception as error:
        recorder.end("failed", (str(error).splitlines() or [type(error).__name__])[0][:300])
        raise
    recorder.end("complete")

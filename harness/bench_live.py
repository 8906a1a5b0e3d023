"""A bench's rounds told to the live page and the Prometheus exporter (`harness bench http
--live`, `bench ws --prometheus`), through the reporter events a run sends (harness.live).

Each app's run in a round is one case of the live state, labelled so that it parses back
(harness.live.state.parse_case_label): the framework first, the protocol where not h1, the
app (ours or minimal) and the round, `aiohttp ours round 3 of at most 60`. An HTTP bench's
wrk run is its case's one step; a WebSocket bench's ramp steps are its case's steps. After
each round the paired ratio so far and its 95 % interval (harness.stats) go to the state as
a bench row, per figure (req/s; KB and CPU µs per connection).

`BenchWatch` is made only with `--live` or `--prometheus`; without them the bench loops get
None and send nothing. Its reporter stops itself on a failure (harness.live.reporters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.monitor import Monitor
from harness.stats import paired_ratio_interval
from model.results import LATENCY_KEYS, Case, Step
from servers.contract import PROTOCOL_H1

if TYPE_CHECKING:
    from harness.live.reporters import LiveReporter
    from harness.live.session import LiveSession

# what the bench measures per app, by figure: its unit on the page and in docs/live.md
BENCH_FIGURES = {
    "req_per_s": "req/s",
    "kb_per_conn": "KB/conn",
    "cpu_us_per_conn": "CPU µs/conn",
    "conns_held": "conns held",
}


def bench_case_label(
    framework: str, protocol: str, app: str, round_index: int, rounds_max: int, *, at_most: bool
) -> str:
    """The live case label of `app`'s run in round `round_index` (from 0): `aiohttp ours
    round 1 of at most 60` (or `of 3` where the rounds are fixed)."""
    on = f" {protocol}" if protocol != PROTOCOL_H1 else ""
    bound = f"at most {rounds_max}" if at_most else str(rounds_max)
    return f"{framework}{on} {app} round {round_index + 1} of {bound}"


def round_row(
    figure: str,
    ours: Sequence[float | None],
    minimal: Sequence[float | None],
    rounds_max: int,
) -> dict[str, Any]:
    """A bench row after a round: each round's figure of ours and minimal, the paired ratio
    ours / minimal so far with its 95 % interval (None with fewer than two rounds)."""
    if figure not in BENCH_FIGURES:
        raise ValueError(f"bench figure {figure!r} is not one of {', '.join(BENCH_FIGURES)}")
    interval = paired_ratio_interval(list(ours), list(minimal))  # type: ignore[arg-type]
    last_ours, last_minimal = (ours[-1], minimal[-1]) if ours and minimal else (None, None)
    ratio = interval.value if interval is not None else None
    if ratio is None and last_ours and last_minimal:
        ratio = last_ours / last_minimal
    return {
        "figure": figure,
        "unit": BENCH_FIGURES[figure],
        "rounds_done": min(len(ours), len(minimal)),
        "rounds_max": rounds_max,
        "ours": [None if v is None else round(v, 3) for v in ours],
        "minimal": [None if v is None else round(v, 3) for v in minimal],
        "ratio": None if ratio is None else round(ratio, 4),
        "ci": None if interval is None else list(interval.rounded(4).as_pair()),
    }


def driver_step(
    offered: float,
    unit: str,
    achieved: float,
    replies: int,
    errors: dict[str, int],
    latency_ms: dict[str, float | None],
) -> Step:
    """A Step of one load run's figures as the live state takes it (a driver's latency
    keys kept, the rest None)."""
    total = sum(n for kind, n in errors.items() if kind != "total")
    return Step(
        offered=offered,
        unit=unit,
        achieved=max(0.0, achieved),
        replies=replies,
        errors={**errors, "total": total},
        error_rate=total / (replies + total) if replies + total else 0.0,
        latency_ms={key: latency_ms.get(key) for key in LATENCY_KEYS},
    )


@dataclass
class BenchWatch:
    """One framework's bench on one protocol as reporter events (module docstring)."""

    reporter: LiveReporter
    framework: str
    protocol: str
    rounds_max: int
    at_most: bool  # the rounds go on to a precision (HTTP), or are fixed (WebSocket)
    scenario: str = "text"
    driver: str = "wrk"

    def app_started(self, app: str, round_index: int, steps: int) -> None:
        """`app`'s run in round `round_index` begins (its case)."""
        label = bench_case_label(
            self.framework, self.protocol, app, round_index, self.rounds_max, at_most=self.at_most
        )
        self.reporter.case_started(label=label, steps=steps)

    def step_started(self, index: int, offered: float, unit: str) -> None:
        self.reporter.step_started(index=index, offered=offered, unit=unit)

    def sample(self, row: dict[str, Any]) -> None:
        """The monitor's row of the last second (its thread)."""
        self.reporter.sample(row=row)

    def step_finished(self, step: Step) -> None:
        self.reporter.step_finished(step=step)

    def load_finished(
        self,
        offered: float,
        unit: str,
        achieved: float,
        replies: int,
        errors: dict[str, int],
        latency_ms: dict[str, float | None],
    ) -> None:
        """A load run's figures (wrk's) as its case's step (driver_step)."""
        try:
            step = driver_step(offered, unit, achieved, replies, errors, latency_ms)
        except Exception as failure:  # the view stops, never the bench
            self.reporter.stop(failure)
            return
        self.reporter.step_finished(step=step)

    def app_finished(self, error: str | None = None) -> None:
        """The app's run ended (`error`: why it failed)."""
        try:
            self.reporter.case_finished(case=self._case(error))
        except Exception as failure:  # the view stops, never the bench
            self.reporter.stop(failure)

    def _case(self, error: str | None) -> Case:
        pinned: dict[str, str | None] = {"mode": "bench", "server": None, "agent": None}
        case = Case(
            self.framework,
            self.scenario,
            "empty",
            self.driver,
            "single",
            pinned,
            "failed" if error else "ok",
            error=error,
            protocol=self.protocol,
        )
        return case

    def round_finished(
        self, figure: str, ours: Sequence[float | None], minimal: Sequence[float | None]
    ) -> None:
        """A round of both apps ended: the figure's rounds so far and their ratio."""
        try:
            row = round_row(figure, ours, minimal, self.rounds_max)
        except Exception as failure:  # the view stops, never the bench
            self.reporter.stop(failure)
            return
        self.reporter.bench_round(
            row={"framework": self.framework, "protocol": self.protocol, **row}
        )


def _start_monitor(
    watch: BenchWatch, pids: list[int], telemetry: Callable[[], dict[int, dict[str, Any]]]
) -> Monitor | None:
    """A monitor of the app's processes feeding `watch` each second (None once the live
    view stopped, or when it cannot start: the view then stops, the bench goes on)."""
    if watch.reporter.broken is not None:
        return None
    monitor = Monitor(telemetry, on_sample=watch.sample)
    try:
        monitor.start(pids)
        # a row now, unreported, as the counters' baseline: the first row a second in then
        # has the server's req/s and CPU over that second (a wrk run lasts a few seconds)
        monitor.sample()
    except Exception as error:
        monitor.stop()
        watch.reporter.stop(error)
        return None
    return monitor


@contextmanager
def app_run(
    watch: BenchWatch | None,
    app: str,
    round_index: int,
    *,
    steps: int,
    sampled: tuple[list[int], Callable[[], dict[int, dict[str, Any]]]] | None = None,
) -> Iterator[None]:
    """`app`'s run in round `round_index` as a live case (nothing without `watch`): begun,
    sampled each second by a monitor of its own where `sampled` gives the app's pids and
    its telemetry source (the WebSocket bench's ramp has its own), ended ok or failed."""
    if watch is None:
        yield
        return
    watch.app_started(app, round_index, steps)
    monitor = _start_monitor(watch, *sampled) if sampled is not None else None
    try:
        yield
    except BaseException as error:
        watch.app_finished(str(error).split("\n")[0] or type(error).__name__)
        raise
    finally:
        if monitor is not None:
            monitor.stop()
    watch.app_finished()


def ws_round_finished(watch: BenchWatch, ours: Sequence[Any], minimal: Sequence[Any]) -> None:
    """A WebSocket bench's round ended (`ours[i]`, `minimal[i]`: harness.bench_ws.WsAppRun
    of round i): KB per connection (the cgroup's slope, else RSS's), CPU µs per opened
    connection and the connections held, each with its ratio so far."""

    def memory(run: Any) -> float | None:
        kb = run.kb_per_connection
        return kb if kb is not None else run.rss_kb_per_connection

    for figure, pick in (
        ("kb_per_conn", memory),
        ("cpu_us_per_conn", lambda run: run.cpu_us_per_connection),
        ("conns_held", lambda run: float(run.held)),
    ):
        watch.round_finished(figure, [pick(r) for r in ours], [pick(r) for r in minimal])


@contextmanager
def live_bench(
    live_address: str | None, prometheus_address: str | None, say: Callable[[str], None]
) -> Iterator[LiveSession | None]:
    """`--live` / `--prometheus` of a bench around it (None: neither asked for): their URLs
    said first; at the end the pages told, and at a terminal the page kept up until Enter;
    on Ctrl-C or an error, told so and stopped."""
    from harness.live.session import start_live  # its web libraries only when asked for

    live = start_live(live_address, prometheus_address)
    if live is None:
        yield None
        return
    live.announce(say)
    try:
        yield live
    except KeyboardInterrupt:
        live.interrupted()
        raise
    except BaseException:
        live.finished("failed", None)
        live.close()
        raise
    live.finished("complete", None)
    live.end(say)


def bench_reporter(
    live: LiveSession | None,
    *,
    run_id: str,
    profile: str,
    frameworks: Sequence[str],
    cases_total: int,
    round_s: float | None,
) -> LiveReporter | None:
    """The reporter of a bench's live state (None without `live`): `cases_total` app runs
    at least, each `round_s` long where known (an HTTP bench's wrk run)."""
    if live is None:
        return None
    from harness.live.state import LiveState

    state = LiveState(
        run_id=run_id,
        profile=profile,
        frameworks=tuple(frameworks),
        cases_total=cases_total,
        step_s=None,
        round_s=round_s,
        kind="bench",
    )
    return live.watch(state, None)

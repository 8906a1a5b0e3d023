"""The WebSocket bench's figures (harness.bench_ws measures them): each app's run, the
paired ratio ours / minimal per figure over the rounds, and its verdict against
RATIO_LIMIT. Pure: no process, no socket.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from dataclasses import dataclass

from harness.stats import Interval, paired_ratio_interval

RATIO_LIMIT = 1.25  # the bench's bar: ours within 1.25× of the minimal server
APPS = ("ours", "minimal")


@dataclass(frozen=True)
class HeldStep:
    """One held step of one app's run: connections open and the app's memory then."""

    connections: int
    cgroup_bytes: int | None
    rss_bytes: int


@dataclass(frozen=True)
class WsAppRun:
    """One app's run in one round: what it held and what that cost it."""

    app: str  # ours or minimal
    target: int  # connections asked for at the top step
    held: int  # connections open at the top step
    opened: int  # handshakes completed up to the top step
    failed: int  # connections that failed or that the app dropped
    kb_per_connection: float | None  # cgroup memory slope
    rss_kb_per_connection: float | None  # process-tree RSS slope (the cross-check)
    cpu_us_per_connection: float | None  # CPU from the first connection to the top hold
    cpu_source: str  # cgroup or process tree
    # why the ramp ended before its top step's hold (the agents' watchdogs), if it did
    cut_short: str | None = None
    # `failed` by reason: failed_<why> (never opened) and closed_<why> (dropped by the app)
    failed_reasons: dict[str, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.app not in APPS:
            raise ValueError(f"app {self.app!r} is not one of {APPS}")
        if min(self.target, self.held, self.opened, self.failed) < 0:
            raise ValueError(f"negative connection counts in {self}")


def slope_kb_per_connection(points: list[tuple[int, float]]) -> float | None:
    """KB per connection: the least-squares slope of bytes over open connections; None
    with fewer than two distinct connection counts."""
    if len({x for x, _ in points}) < 2:
        return None
    xs = [float(x) for x, _ in points]
    slope = statistics.linear_regression(xs, [float(y) for _, y in points]).slope
    return round(slope / 1024, 3)


def cpu_us_per_connection(
    cpu_before_s: float, cpu_after_s: float, opened: int, idle_cpu_s: float = 0.0
) -> float | None:
    """CPU µs per opened connection over a span, less `idle_cpu_s` (what the app spends
    idle over as long: its timers); None when none opened."""
    if opened <= 0:
        return None
    return round(max(0.0, cpu_after_s - cpu_before_s - idle_cpu_s) / opened * 1e6, 2)


def verdict(interval: Interval | None, limit: float = RATIO_LIMIT) -> tuple[str, str | None]:
    """The ratio against `limit`: `within` when its 95 % interval lies at or under it,
    `above` when wholly over it, else `undecided` with the reason."""
    if interval is None:
        return "undecided", "no interval: fewer than two rounds with both figures"
    if interval.high <= limit:
        return "within", None
    if interval.low > limit:
        return "above", None
    return "undecided", (
        f"the 95 % interval [{interval.low:.2f}, {interval.high:.2f}] straddles {limit:g}×: "
        "more rounds narrow it"
    )


@dataclass(frozen=True)
class WsRatio:
    """ours / minimal for one figure: the rounds' means, the paired ratio and its
    interval, and the verdict against RATIO_LIMIT."""

    ours: float | None
    minimal: float | None
    ratio: float | None
    ci: tuple[float, float] | None
    verdict: str  # within, above, undecided
    reason: str | None = None


def ws_ratio(ours: list[float | None], minimal: list[float | None]) -> WsRatio:
    """The paired figure of the rounds (`ours[i]` and `minimal[i]` ran in round i)."""
    interval = paired_ratio_interval(ours, minimal)  # type: ignore[arg-type]
    ours_known = [v for v in ours if v is not None]
    minimal_known = [v for v in minimal if v is not None]
    ours_mean = round(statistics.fmean(ours_known), 3) if ours_known else None
    minimal_mean = round(statistics.fmean(minimal_known), 3) if minimal_known else None
    ratio = interval.value if interval else None
    if ratio is None and ours_mean and minimal_mean and minimal_mean > 0:
        ratio = ours_mean / minimal_mean
    word, reason = verdict(interval)
    return WsRatio(
        ours_mean,
        minimal_mean,
        round(ratio, 4) if ratio is not None else None,
        interval.rounded(4).as_pair() if interval else None,
        word,
        reason,
    )


@dataclass(frozen=True)
class WsBenchResult:
    """Our server against the minimal WebSocket server of its runtime, over the rounds."""

    framework: str
    loop: str | None
    connections: int  # asked for at the top step
    rounds: int
    memory: WsRatio  # KB per connection (cgroup; RSS where there is no cgroup)
    memory_source: str  # cgroup or rss
    rss: WsRatio  # KB per connection by RSS: the cross-check
    cpu: WsRatio  # CPU µs per opened connection
    cpu_source: str  # cgroup or process tree
    ours_held_min: int  # the fewest connections each app held at the top step, of its rounds
    minimal_held_min: int
    failed: dict[str, int]  # connections failed or dropped, per app, over every round
    # the same by reason, per app, over every round (failed_<why>, closed_<why>)
    failed_reasons: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    ours_runs: tuple[WsAppRun, ...] = ()  # each round's figures (round i: [i] of each)
    minimal_runs: tuple[WsAppRun, ...] = ()
    server_processes: int = 1  # each app's processes on the port (workers)
    load: str = "local"  # where the agents ran: here, or the fleet's hosts

    @property
    def note(self) -> str | None:
        """What makes the figures partial: an app that did not hold every connection."""
        short = [
            f"{app} held {held:,} of {self.connections:,}"
            for app, held in (("ours", self.ours_held_min), ("minimal", self.minimal_held_min))
            if held < self.connections
        ]
        failed = [
            f"{app} {count:,} failed{_reasons_said(self.failed_reasons.get(app, {}))}"
            for app, count in self.failed.items()
            if count
        ]
        runs = self.ours_runs + self.minimal_runs
        cut = list(dict.fromkeys(f"{r.app}: {r.cut_short}" for r in runs if r.cut_short))
        return "; ".join(short + failed + cut) or None


def _reasons_said(reasons: dict[str, int]) -> str:
    """' (handshake_timeout 200, closed_reset 14)': the failures by reason, most first."""
    if not reasons:
        return ""
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    return " (" + ", ".join(f"{why.removeprefix('failed_')} {n:,}" for why, n in ranked) + ")"


def failed_reasons_of(errors: dict[str, float]) -> dict[str, int]:
    """A connection step's errors by reason (its `total` left out, zeros dropped)."""
    return {why: int(n) for why, n in errors.items() if why != "total" and n}


def _sum_reasons(runs: list[WsAppRun]) -> dict[str, int]:
    return dict(sum((Counter(r.failed_reasons) for r in runs), Counter()))


def ws_bench_summary(
    framework: str,
    loop: str | None,
    ours: list[WsAppRun],
    minimal: list[WsAppRun],
    *,
    server_processes: int = 1,
    load: str = "local",
) -> WsBenchResult:
    """The bench's figures from its paired runs (`ours[i]` and `minimal[i]`: round i). A
    round where either app held fewer connections than asked is still counted, and said
    (`note`); its verdicts are then `undecided`."""
    if not ours or len(ours) != len(minimal):
        raise ValueError(f"{len(ours)} runs of ours and {len(minimal)} of minimal: need pairs")
    by_cgroup = all(r.kb_per_connection is not None for r in ours + minimal)
    memory = ws_ratio(
        [r.kb_per_connection if by_cgroup else r.rss_kb_per_connection for r in ours],
        [r.kb_per_connection if by_cgroup else r.rss_kb_per_connection for r in minimal],
    )
    rss = ws_ratio(
        [r.rss_kb_per_connection for r in ours], [r.rss_kb_per_connection for r in minimal]
    )
    cpu = ws_ratio(
        [r.cpu_us_per_connection for r in ours], [r.cpu_us_per_connection for r in minimal]
    )
    target = ours[0].target
    result = WsBenchResult(
        framework,
        loop,
        target,
        len(ours),
        memory,
        "cgroup" if by_cgroup else "rss",
        rss,
        cpu,
        ours[0].cpu_source,
        min(r.held for r in ours),
        min(r.held for r in minimal),
        {"ours": sum(r.failed for r in ours), "minimal": sum(r.failed for r in minimal)},
        {"ours": _sum_reasons(ours), "minimal": _sum_reasons(minimal)},
        tuple(ours),
        tuple(minimal),
        server_processes,
        load,
    )
    note = result.note
    if note is None:
        return result
    return dataclasses.replace(
        result,
        **{
            name: dataclasses.replace(figure, verdict="undecided", reason=note)
            for name, figure in (("memory", memory), ("rss", rss), ("cpu", cpu))
        },
    )

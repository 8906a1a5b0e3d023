"""A case in one line: `Summary`, its peak and what was measured at it, validated."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from model.attacks import AttackRetention, retention_from_dict
from model.ramps import CLOSE_MODES
from model.steps import FLAG_MEANINGS, check_finite

PEAK_UNITS = ("req/s", "conns")
ROLES = ("framework", "baseline")
# where an imprecise case's spread comes from (harness.run.precision.noise_source)
NOISE_SOURCES = ("server", "load generator", "machine", "unknown")
# the summary's intervals: [low, high] at 95 % (harness.stats)
INTERVAL_FIELDS = (
    "peak_ci",
    "ratio_to_nginx_ci",
    "p99_at_peak_ci_ms",
    "server_cpu_at_peak_ci_pct",
    "tls_tax_ci",
    "cpu_us_per_req_ci",
)


def _non_negative(name: str, value: float | None) -> None:
    check_finite(name, value)
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0, not {value!r}")


@dataclass(frozen=True)
class Summary:
    """A case in one line: its peak and what was measured at it, with the case's context.

    Written by the runner, read by compare's table, the figures and the report. Fields
    that do not apply to a case are None (docs/results.md lists them with their units).
    """

    # the peak: rate ramps, the highest offered req/s held error-free at ≥ 95 %; concurrency
    # ramps, the best error-free req/s; connection ramps, the connections held at the
    # highest step with no error of its own (harness.run.analysis.connection_peak_step)
    peak: float | None = None
    peak_unit: str = "req/s"
    peak_offered: float | None = None  # the step's offered load (its unit is the step's)
    p99_at_peak_ms: float | None = None
    avg_latency_at_peak_ms: float | None = None
    megabytes_per_s_at_peak: float | None = None
    server_cpu_at_peak_pct: float | None = None  # % of one core
    rss_max_bytes: int | None = None  # the server's largest RSS over every step
    errors_total: int = 0  # over every step
    flags: tuple[str, ...] = ()  # every step flag raised in the case
    # set over the run
    role: str | None = None  # framework or baseline
    ratio_to_nginx: float | None = None  # peak / nginx's peak in the same run
    repeats: int = 1
    failed_repeats: tuple[str, ...] = ()  # the errors of repeats that failed
    # what the case ran on
    topology: dict[str, Any] | None = None  # process model and instances (port, CPUs)
    backends: dict[str, Any] | None = None  # file set, GridFS, memcached as prepared
    sink_store: dict[str, Any] | None = None  # where the sink's records were counted
    limit_note: str | None = None  # an OS or backend limit that may cap the figure
    # connection ramps
    breaking_point: dict[str, Any] | None = None  # connections, reason, t (and capped_by)
    memory_per_connection_bytes: float | None = None  # RSS slope over the held steps
    baseline_rss_bytes: int | None = None  # the idle server before any connection
    limits: dict[str, Any] | None = None  # agent processes, sockets per process, sources
    # confirmation rounds (harness.run.rounds): the ramp found the peak (`ramp_peak`, at
    # `peak_offered`); `rounds` fixed-load runs there, interleaved with the other
    # frameworks, measured it again. With rounds, `peak`, `p99_at_peak_ms`,
    # `server_cpu_at_peak_pct` and `ratio_to_nginx` are the rounds' means, each with its
    # 95 % interval [low, high]; rounds flagged `contended` are left out when two remain.
    rounds: int = 0
    rounds_contended: int = 0
    ramp_peak: float | None = None
    peak_ci: tuple[float, float] | None = None
    ratio_to_nginx_ci: tuple[float, float] | None = None
    p99_at_peak_ci_ms: tuple[float, float] | None = None
    server_cpu_at_peak_ci_pct: tuple[float, float] | None = None
    # rate ramps: where p99 leaves its floor (harness.run.analysis.find_knee)
    knee: dict[str, Any] | None = None  # offered, p99_ms, floor_p99_ms, threshold_ms, ...
    # the delay scenario (harness.run.delay.held_in_flight): the requests held in flight at
    # p99 ≤ 2 × the delay — concurrency, p99_ms, limit_ms, req_s — None when no step held
    held_in_flight: dict[str, Any] | None = None
    # precision (harness.run.precision): the half-width of `peak_ci` in % of `peak`; the
    # precision asked (`--precision`, None: a fixed number of rounds); rounds kept out of
    # the figures, each {"round": i, "reason": ...}; the round length the rounds used
    # (chosen from the first rounds' spread); and for a case that stopped short
    # (`imprecise` among its flags) how wide it got and where the noise came from
    half_width_pct: float | None = None
    precision_pct: float | None = None
    rounds_excluded: tuple[dict[str, Any], ...] = ()
    round_duration_s: float | None = None
    imprecise_reason: str | None = None
    noise_source: str | None = None  # one of NOISE_SOURCES
    noise_note: str | None = None
    # h1-tls cases: the peak / the same server's h1 peak in the run (the TLS tax), with its
    # 95 % interval when both ran rounds (paired round by round)
    tls_tax: float | None = None
    tls_tax_ci: tuple[float, float] | None = None
    # the cost of a request (harness.cgroups): the server's CPU µs per reply at the peak
    # (with rounds: their mean and its 95 % interval), the load generator's, the server's
    # memory peak (its cgroup's: every process, sockets' buffers where counted), and what
    # the server's cgroup was (mode v1, v2 or none and why, pinning, limits, throttling)
    cpu_us_per_req: float | None = None
    cpu_us_per_req_ci: tuple[float, float] | None = None
    agent_cpu_us_per_req: float | None = None
    memory_peak_bytes: int | None = None
    cgroup: dict[str, Any] | None = None
    memory_per_connection_kb: float | None = None  # connection ramps: the cgroup's slope
    # connection ramps: the memory at the top held step — server RSS and cgroup, agents'
    # RSS, the kernel's slab, TCP buffers, the host's available — and each one's KB per
    # connection (harness.connections.memory_breakdown)
    memory_breakdown: dict[str, Any] | None = None
    # connection ramps: the closing step at the ramp's end, every connection closed at once
    # (harness.connections.closing_record): `close` (orderly or drop), `connections`,
    # `open_after`, `close_s`, `tick_max_ms`, `tick_avg_ms`, `gc_collections`,
    # `gc_pause_ms`, `followed_s`; with repeats, the one with the worst tick
    closing: dict[str, Any] | None = None
    # cpu_us_per_req over nginx's in the same run (as ratio_to_nginx pairs its case)
    cpu_ratio_to_nginx: float | None = None
    # --cpu-profile: the profiled round at the peak (harness.run.profiled): the sampler,
    # the CPU µs/request split by category (model.cpu_split), the top frames, the file
    cpu_profile: dict[str, Any] | None = None
    # the h2-attacks profile: per attack, the goodput the legitimate clients kept and their
    # p99 with and without one attacking connection (harness.run.attack_figures)
    attack_retention: tuple[AttackRetention, ...] = ()

    def __post_init__(self) -> None:
        if self.peak_unit not in PEAK_UNITS:
            raise ValueError(f"peak_unit {self.peak_unit!r} is not one of {', '.join(PEAK_UNITS)}")
        if self.role is not None and self.role not in ROLES:
            raise ValueError(f"role {self.role!r} is not one of {', '.join(ROLES)}")
        for name in (
            "peak",
            "peak_offered",
            "p99_at_peak_ms",
            "avg_latency_at_peak_ms",
            "megabytes_per_s_at_peak",
            "server_cpu_at_peak_pct",
            "rss_max_bytes",
            "ratio_to_nginx",
            "baseline_rss_bytes",
            "half_width_pct",
            "precision_pct",
            "round_duration_s",
            "tls_tax",
            "cpu_us_per_req",
            "agent_cpu_us_per_req",
            "memory_peak_bytes",
            "cpu_ratio_to_nginx",
        ):
            _non_negative(name, getattr(self, name))
        check_finite("memory_per_connection_bytes", self.memory_per_connection_bytes)
        check_finite("memory_per_connection_kb", self.memory_per_connection_kb)
        if self.cgroup is not None and self.cgroup.get("mode") not in ("v1", "v2", "none"):
            raise ValueError(f"cgroup mode {self.cgroup.get('mode')!r} is not v1, v2 or none")
        for name in INTERVAL_FIELDS:
            pair = getattr(self, name)
            if pair is not None and (
                not isinstance(pair, tuple) or len(pair) != 2 or not pair[0] <= pair[1]
            ):
                raise ValueError(f"{name} must be a (low, high) pair, not {pair!r}")
        for name in ("errors_total", "repeats", "rounds", "rounds_contended"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, not {self.repeats}")
        if not isinstance(self.flags, tuple) or not isinstance(self.failed_repeats, tuple):
            raise ValueError("flags and failed_repeats must be tuples")
        unknown = set(self.flags) - set(FLAG_MEANINGS)
        if unknown:
            raise ValueError(f"unknown summary flags {sorted(unknown)}")
        if self.breaking_point is not None and "connections" not in self.breaking_point:
            raise ValueError(f"breaking_point lacks 'connections': {self.breaking_point}")
        if self.knee is not None and "offered" not in self.knee:
            raise ValueError(f"knee lacks 'offered': {self.knee}")
        if self.noise_source is not None and self.noise_source not in NOISE_SOURCES:
            raise ValueError(
                f"noise_source {self.noise_source!r} is not one of {', '.join(NOISE_SOURCES)}"
            )
        if not isinstance(self.rounds_excluded, tuple) or not all(
            isinstance(e, dict) and {"round", "reason"} <= set(e) for e in self.rounds_excluded
        ):
            raise ValueError(
                "rounds_excluded must be a tuple of {round, reason}, not "
                f"{self.rounds_excluded!r}"
            )
        if ("imprecise" in self.flags) != (self.imprecise_reason is not None):
            raise ValueError("an imprecise case (flag) needs an imprecise_reason, and only it")
        if self.closing is not None and (
            self.closing.get("close") not in CLOSE_MODES or "tick_max_ms" not in self.closing
        ):
            raise ValueError(
                f"closing needs close ({' or '.join(CLOSE_MODES)}) and tick_max_ms: {self.closing}"
            )


SUMMARY_FIELDS = tuple(f.name for f in fields(Summary))


def summary_from_dict(data: dict[str, Any]) -> Summary:
    """A Summary from its JSON form; a key Summary does not know is refused by name."""
    unknown = sorted(set(data) - set(SUMMARY_FIELDS))
    if unknown:
        raise ValueError(f"unknown summary fields {unknown}")
    names = ("flags", "failed_repeats", "rounds_excluded", *INTERVAL_FIELDS)
    tuples = {k: tuple(data[k]) for k in names if data.get(k) is not None}
    if data.get("attack_retention") is not None:
        tuples["attack_retention"] = tuple(retention_from_dict(r) for r in data["attack_retention"])
    return Summary(**{**data, **tuples})

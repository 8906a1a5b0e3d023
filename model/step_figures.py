"""A step's figures beyond its common columns, as a typed record: `StepFigures`.

What a driver reports (its duration, bytes, connections...), what the harness measured
around it (CPU waits, the sink's backlog, the server's cgroup...), and what a round, a
repeat or a connection ramp adds. Every field is optional (None: not measured, or does
not apply to this step) and has one line of meaning in its metadata (`FIGURE_DOCS`),
from which docs/results.md's table is written (`figures_reference_markdown`).

A driver or a harness function that names a figure this record does not declare fails at
once (TypeError), instead of leaving a blank in some table. run.json (harness.run/6)
writes a step's `figures` with the fields that are None left out (`figures_to_dict`);
`figures_from_dict` reads them back, refusing a name it does not know.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, NotRequired, TypedDict

# every latency record has these keys (ms; None where not measured): a step's latency_ms
# (model.steps, which imports it from here) and the handshakes' handshake_ms
LATENCY_KEYS = ("avg", "p50", "p90", "p99", "p99.9", "p99.99", "max")


def _doc(text: str) -> dict[str, str]:
    """A figure's one line of meaning, as its field's metadata."""
    return {"doc": text}


@dataclass(frozen=True)
class CgroupCounters:
    """What the server's cgroup counted over one step (harness.monitor.cgroup_step)."""

    cpu_s: float  # CPU seconds of every process in the group
    periods: int  # CFS periods with work
    throttled_periods: int  # periods in which the CPU quota held the group back
    throttled_s: float  # time the quota held it back
    oom_kills: int  # processes the kernel killed for the group's memory
    memory_bytes: int | None  # the group's memory at the step's end


@dataclass(frozen=True)
class Throttling:
    """A step whose server was held back by its CPU quota (harness.run.analysis.throttled)."""

    periods: int  # CFS periods held back
    of_periods: int  # of the periods with work
    time_s: float  # the time held back


@dataclass(frozen=True)
class RetriedStep:
    """The first attempt at a step that was run twice (its driver gave no figures)."""

    first_error: str | None  # why the first attempt gave none
    first_raw: str  # its raw files, as a glob under raw/


class FleetHostFigures(TypedDict):
    """What one load host measured in a fleet's HTTP step (harness.fleet.steps.host_figures),
    also written to raw/<label>-hosts.json."""

    host: str
    offered: int  # its share of the step's load
    replies: int
    errors: dict[str, int]  # by kind, as DriverResult.errors
    achieved: float  # req/s
    duration_s: float
    latency_ms: dict[str, float | None]  # its own percentiles (LATENCY_KEYS)
    driver_cpu_pct: float | None  # % of one core
    load_cpus: int
    driver_bound: bool  # its driver used >= 90 % of its load CPUs
    requests: NotRequired[int]
    bytes_read: NotRequired[int]
    start_lag_ms: float | None  # its load's start after the harness's go
    start_skew_ms: float | None  # after the first host's


class HostConnections(TypedDict):
    """One load host's connections in a fleet's connection-ramp step (drivers.agent.plan)."""

    open: int
    opened: int
    failed: int


@dataclass(frozen=True)
class StepFigures:
    """A step's figures beyond its common columns; None where not measured."""

    # what the load generator reported
    duration_s: float | None = field(
        default=None, metadata=_doc("s: how long the driver ran, as it reports")
    )
    requests: int | None = field(
        default=None, metadata=_doc("count: requests the driver sent or logged (wrk, h2load, oha)")
    )
    bytes_read: int | None = field(
        default=None, metadata=_doc("bytes the driver read (wrk, h2load, oha)")
    )
    megabytes: float | None = field(default=None, metadata=_doc("MB the driver read (siege)"))
    megabytes_per_s: float | None = field(default=None, metadata=_doc("MB/s the driver read"))
    availability_pct: float | None = field(
        default=None, metadata=_doc("%: siege's share of transactions that succeeded")
    )
    complete_requests: int | None = field(
        default=None, metadata=_doc("count: ab's complete requests")
    )
    length_mismatches: int | None = field(
        default=None,
        metadata=_doc(
            "count: ab's replies whose length differed from the first, where bodies may vary "
            "(kept out of the errors)"
        ),
    )
    connections: int | None = field(
        default=None, metadata=_doc("count: connections the driver opened (h2load, oha, mcload)")
    )
    streams_per_connection: int | None = field(
        default=None, metadata=_doc("h2load: streams multiplexed per connection")
    )
    unanswered: int | None = field(
        default=None, metadata=_doc("count: h2load's requests in flight when the step ended")
    )
    tls_version: str | None = field(
        default=None, metadata=_doc("h2load: the TLS version it reports (`TLSv1.3`)")
    )
    cipher: str | None = field(default=None, metadata=_doc("h2load: the cipher it reports"))
    offered_per_s: float | None = field(
        default=None, metadata=_doc("req/s: the rate oha was asked for")
    )
    sent_per_s: float | None = field(default=None, metadata=_doc("req/s: the rate oha sent at"))
    schedule_error: float | None = field(
        default=None, metadata=_doc("oha: (sent − due) / due over the step")
    )
    max_in_flight: int | None = field(
        default=None, metadata=_doc("count: oha's most requests in flight at once")
    )
    aborted_at_deadline: int | None = field(
        default=None,
        metadata=_doc("count: requests oha itself cut at the end of `-z` (not errors)"),
    )
    send_lag_p99_ms: float | None = field(
        default=None, metadata=_doc("ms: oha's p99 wait between a request's due time and its send")
    )
    replies_all: int | None = field(
        default=None, metadata=_doc("count: httperf's replies of any status")
    )
    connection_rate_per_s: float | None = field(
        default=None, metadata=_doc("connections/s httperf opened")
    )
    max_concurrent_connections: int | None = field(
        default=None, metadata=_doc("count: httperf's most connections at once")
    )
    connection_time_median_ms: float | None = field(
        default=None, metadata=_doc("ms: httperf's median connection time")
    )
    handshakes: int | None = field(
        default=None, metadata=_doc("count: TLS handshakes (the handshakes driver)")
    )
    resumed: int | None = field(default=None, metadata=_doc("count: handshakes the server resumed"))
    resumed_fraction: float | None = field(
        default=None, metadata=_doc("0..1: resumed / handshakes")
    )
    handshake_ms: dict[str, float | None] | None = field(
        default=None,
        metadata=_doc(
            "ms: connect to the end of the TLS handshake: `avg`, `p50` … `p99.99`, `max`"
        ),
    )
    resumed_per_s: float | None = field(
        default=None, metadata=_doc("handshakes/s of the resumed half (resumption `both`)")
    )
    resumed_run_fraction: float | None = field(
        default=None, metadata=_doc("0..1: the resumed half's resumed share")
    )
    resumption_speedup: float | None = field(
        default=None, metadata=_doc("the resumed half's rate over the full one's")
    )
    window_replies: int | None = field(
        default=None,
        metadata=_doc(
            "count: every reply of the step's window, both halves (the CPU per reply's divisor)"
        ),
    )
    processes: int | None = field(
        default=None, metadata=_doc("count: driver processes run side by side (their sums)")
    )
    overran_s: float | None = field(
        default=None, metadata=_doc("s: how long the driver outlived its step (the watchdog)")
    )
    stopped_by: str | None = field(
        default=None, metadata=_doc("what stopped an overrunning driver (`SIGINT`, `ss -K`...)")
    )
    # a fleet run's step (harness.fleet.steps)
    hosts: list[FleetHostFigures] | dict[str, HostConnections] | None = field(
        default=None,
        metadata=_doc(
            "fleet: HTTP steps, a list of each host's figures; connection steps, host → "
            "`open`, `opened`, `failed`"
        ),
    )
    latency_upper_bound_ms: dict[str, float | None] | None = field(
        default=None,
        metadata=_doc(
            "ms: fleet, the hosts' largest `p50`, `p90`, `p99` (an upper bound of the merged)"
        ),
    )
    start_skew_ms_max: float | None = field(
        default=None, metadata=_doc("ms: fleet, the latest host's start after the first")
    )
    driver_bound_hosts: list[str] | None = field(
        default=None, metadata=_doc("fleet: hosts whose driver used ≥ 90 % of its CPUs")
    )
    # what the harness measured around an HTTP step
    probe_failures: int | None = field(
        default=None, metadata=_doc("count: the outside probe's failed requests")
    )
    driver_cpu_pct: float | None = field(
        default=None, metadata=_doc("% of one core: the driver's CPU, as it reports")
    )
    server_cpu_wait_pct: float | None = field(
        default=None, metadata=_doc("% of one core the server spent runnable but waiting for a CPU")
    )
    agent_cpu_wait_pct: float | None = field(
        default=None,
        metadata=_doc("% of one core the load generator spent runnable but waiting for a CPU"),
    )
    agent_cpu_from: str | None = field(
        default=None,
        metadata=_doc(
            "where the load's CPU was read: `cgroup` (its load cgroup) or `reaped` (its children)"
        ),
    )
    other_cpu_pct: dict[str, float] | None = field(
        default=None,
        metadata=_doc("% of one core other processes used on the `server`'s and the `load`'s CPUs"),
    )
    harness_cpu_pct: float | None = field(
        default=None, metadata=_doc("% of one core: the harness's own threads")
    )
    sink_errors_in_step: int | None = field(
        default=None, metadata=_doc("count: records the sink refused in the step")
    )
    backlog_max: int | None = field(
        default=None, metadata=_doc("count: records waiting for the sink, at most")
    )
    replies_per_s: list[float] | None = field(
        default=None,
        metadata=_doc("req/s: the server's replies in each whole telemetry second of the step"),
    )
    db_cpu_pct: float | None = field(
        default=None, metadata=_doc("% of one core: the database the harness started")
    )
    cgroup: CgroupCounters | None = field(
        default=None,
        metadata=_doc(
            "what the server's cgroup counted in the step: `cpu_s`, `periods`, "
            "`throttled_periods`, `throttled_s`, `oom_kills`, `memory_bytes`"
        ),
    )
    throttled: Throttling | None = field(
        default=None,
        metadata=_doc("the CPU quota held the server back: `periods`, `of_periods`, `time_s`"),
    )
    negotiated: str | None = field(
        default=None, metadata=_doc("the protocol the load generator says it spoke")
    )
    driver_error: str | None = field(
        default=None, metadata=_doc("why the driver gave no figures (a failed step)")
    )
    retried: RetriedStep | None = field(
        default=None,
        metadata=_doc("a step run twice: the first attempt's `first_error` and `first_raw` files"),
    )
    # confirmation rounds and repeats
    round: int | None = field(default=None, metadata=_doc("a confirmation round's index (0-based)"))
    round_s: float | None = field(default=None, metadata=_doc("s: the round's length asked"))
    trials: list[list[float]] | None = field(
        default=None, metadata=_doc("a first round tried at tied loads: `[[load, req/s], …]`")
    )
    repeats: int | None = field(default=None, metadata=_doc("count: runs of a repeated step"))
    achieved_runs: list[float] | None = field(default=None, metadata=_doc("each repeat's achieved"))
    spread: float | None = field(
        default=None, metadata=_doc("(max − min) / median of the repeats' achieved")
    )
    # the h2-attacks profile's rounds (harness.run.attack_case)
    attack: str | None = field(
        default=None,
        metadata=_doc(
            "h2-attacks: the attack one connection ran during the round (`none`: a round "
            "without; unset: the closed-loop peak round that sets the rate)"
        ),
    )
    attack_ending: str | None = field(
        default=None,
        metadata=_doc(
            "h2-attacks: how the attacker's connection ended (`goaway`, `closed`, `reset`, "
            "`stopped-reading`, `kept-open`)"
        ),
    )
    attack_goaway_code: int | None = field(
        default=None, metadata=_doc("h2-attacks: the GOAWAY's error code the attacker read")
    )
    attack_units_sent: int | None = field(
        default=None, metadata=_doc("count: h2-attacks, the attack's units written")
    )
    attack_bytes_sent: int | None = field(
        default=None, metadata=_doc("bytes: h2-attacks, what the attacker wrote")
    )
    attack_s: float | None = field(
        default=None, metadata=_doc("s: h2-attacks, how long the attacker wrote")
    )
    rps_per_client: float | None = field(
        default=None, metadata=_doc("req/s: h2-attacks, each h2load client's pace (`--rps`)")
    )
    rate_from: str | None = field(
        default=None,
        metadata=_doc(
            "h2-attacks: where the round's rate came from (`50 % of the peak 12,000 req/s`, "
            "or `the profile`)"
        ),
    )
    # connection ramps
    open: int | None = field(
        default=None, metadata=_doc("count: connections open at the hold's end")
    )
    errors_in_step: int | None = field(
        default=None, metadata=_doc("count: errors of the step's own connections")
    )
    messages_out_per_s: float | None = field(
        default=None, metadata=_doc("messages/s the agents sent over the hold")
    )
    messages_in_per_s: float | None = field(
        default=None, metadata=_doc("messages/s the server sent over the hold")
    )
    rss_per_connection_bytes: int | None = field(
        default=None,
        metadata=_doc("bytes: the server's RSS over the idle server's, per open connection"),
    )
    cgroup_memory_bytes: int | None = field(
        default=None, metadata=_doc("bytes: the server's cgroup at the hold's end")
    )
    agent_rss_bytes: int | None = field(
        default=None, metadata=_doc("bytes: the agents' RSS at the hold's end")
    )
    hold_s: float | None = field(
        default=None, metadata=_doc("s: how long every connection was held")
    )
    host_available_bytes: int | None = field(
        default=None, metadata=_doc("bytes: the host's available memory, hold's end")
    )
    kernel_slab_bytes: int | None = field(
        default=None, metadata=_doc("bytes: the kernel's slab at the hold's end")
    )
    tcp_buffer_bytes: int | None = field(
        default=None, metadata=_doc("bytes: TCP's buffers at the hold's end")
    )
    conntrack_count: int | None = field(
        default=None, metadata=_doc("count: conntrack's entries at the hold's end")
    )

    def __repr__(self) -> str:
        """Only the figures that are set: a step's record names dozens that are not."""
        shown = ", ".join(f"{name}={value!r}" for name, value in figures_to_dict(self).items())
        return f"StepFigures({shown})"

    def __post_init__(self) -> None:
        for each in fields(self):
            value = getattr(self, each.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"step figure {each.name} must be finite, not {value!r}")
        if self.handshake_ms is not None:
            unknown = set(self.handshake_ms) - set(LATENCY_KEYS)
            if unknown:
                raise ValueError(f"handshake_ms has unknown keys {sorted(unknown)}")


FIGURE_NAMES = tuple(f.name for f in fields(StepFigures))
FIGURE_DOCS = {f.name: f.metadata["doc"] for f in fields(StepFigures)}
# fields held as nested records, and how each is read back from JSON
_RECORDS: dict[str, type] = {
    "cgroup": CgroupCounters,
    "throttled": Throttling,
    "retried": RetriedStep,
}


def figures_from_dict(data: dict[str, Any]) -> StepFigures:
    """A StepFigures from its JSON form; a name it does not declare is refused by name."""
    unknown = sorted(set(data) - set(FIGURE_NAMES))
    if unknown:
        raise ValueError(f"unknown step figures {unknown}")
    records = {
        name: kind(**data[name])
        for name, kind in _RECORDS.items()
        if isinstance(data.get(name), dict)
    }
    return StepFigures(**{**data, **records})


def figures_to_dict(figures: StepFigures) -> dict[str, Any]:
    """A StepFigures's JSON form: its fields that are set (None ones left out)."""
    return {name: value for name, value in asdict(figures).items() if value is not None}


def numeric_sum(many: list[StepFigures]) -> dict[str, int | float]:
    """The numeric figures of processes that ran side by side, each summed over those that
    have it (drivers.result.merge_results); other figures do not add up and are left out."""
    sums: dict[str, int | float] = {}
    for figures in many:
        for name in FIGURE_NAMES:
            value = getattr(figures, name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                sums[name] = sums.get(name, 0) + value
    return sums


def figures_reference_markdown() -> str:
    """docs/results.md's table of a step's figures, one row a field."""
    rows = ["| figure | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {doc} |" for name, doc in FIGURE_DOCS.items()]
    return "\n".join(rows) + "\n"

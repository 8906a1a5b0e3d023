"""The result model, schema `harness.run/5`: Run → Case → Step and Summary, frozen and validated.

The format is described field by field in docs/results.md.

Format history (bump SCHEMA on any change; old files are upgraded by `read_run` or refused
by name):
- harness.run/1 — first version: a case's `summary` is a free dict whose keys depend on
  the ramp kind and on what ran (`ratio_to_nginx` only beside nginx, `repeats` only when
  repeated, `breaking_point` only for connection ramps...).
- harness.run/2 — the summary is a fixed record (`Summary`): every field is always
  written, `null` where it does not apply; `repeats` is 1 for a single run;
  `failed_repeats` and `flags` are lists. Read from /1 by filling the absent fields with
  their defaults (`upgrade_run_1`); a /1 summary key /2 does not know is refused by name.
- harness.run/3 — the run says how it ended: `status` (`running` while under way, then
  `complete`, `interrupted` or `failed`) and `status_reason` (required when interrupted or
  failed); `config.interrupted` is gone. Read from /2 by `upgrade_run_2`: interrupted
  when `config.interrupted` was true, complete when `finished` is set, else `unknown`
  (/2 wrote no end for a run that died on a SIGTERM, an OOM kill or an exception).
- harness.run/4 — intervals and whole latency. A case's `rounds` (one Step per round,
  measured at the ramp's peak, interleaved with the other frameworks); summary fields
  `rounds`, `rounds_contended`, `ramp_peak`, the 95 % intervals `peak_ci`,
  `ratio_to_nginx_ci`, `p99_at_peak_ci_ms`, `server_cpu_at_peak_ci_pct` ([low, high])
  and `knee` (rate ramps: where p99 leaves its floor); the run's `verdict` (ranking in
  groups that admit ties, ratios with intervals, one sentence) and `thresholds` (each
  rule judged against each case it names: `rule`, `framework`, `case`, `value`,
  `interval`, `held`, `judged_on`); a step's `bottleneck` (which side limited it),
  `latency_ms` with `p99.9` and `p99.99`, `latency_uncorrected_ms` (open-loop drivers:
  from each request's actual send, beside `latency_ms` from its intended send; `null`
  otherwise) and `histograms` (name → an HdrHistogram of microseconds, base64, `{}` where
  the driver keeps none); the flags `contended` and `cpu_contended`. Read from /3 by
  `upgrade_run_3`: the new percentiles `null`; no rounds, intervals, verdict, thresholds,
  bottleneck, histograms or knee.
- harness.run/5 — protocol is an axis: a case's `protocol` (h1, h1-tls, h2, h2c:
  servers.contract.PROTOCOLS) is part of its identity, and its `negotiated` record says
  what the harness's probe connection found right after the server started (TLS:
  `tls_version`, `cipher`, `key_type`, `alpn`; h2c: the protocol only) and whether the
  load generator verified the certificate against the run's CA (`ca_trusted`); `null`
  for h1. The summary's `tls_tax` and `tls_tax_ci` (h1-tls cases: the peak as a ratio
  to the same server's h1 peak, with its 95 % interval). Read from /4 by
  `upgrade_run_4`: every case `h1`, `negotiated` null (/4 spoke cleartext HTTP/1.1
  only), no TLS tax.
  Also in /5, rounds to a precision (harness.run.precision): the summary's
  `half_width_pct`, `precision_pct`, `rounds_excluded` (each `{round, reason}`),
  `round_duration_s`, `imprecise_reason`, `noise_source` (NOISE_SOURCES) and
  `noise_note`, and the flag `imprecise`; a step's `extra.replies_per_s` (the server's
  telemetry, second by second), a round's `extra.round_s` and a first round tried at
  tied loads its `extra.trials` (`[[load, req/s], …]`, harness.run.rounds). A /4 file (or a /5 one
  from before them) reads with their defaults: no precision asked, nothing excluded.
  A `verify` entry may carry `deviations` (the robustness rules the server bent: `check`,
  `key`, `sent`, `expected`, `came`, `declared`; harness.verify.severity); a file without
  them reads as a case with none (`Case.deviations`).
  Also in /5, cgroups (harness.cgroups): a step's `cpu_us_per_req` (the server's CPU
  over the step's replies, in µs) and `agent_cpu_us_per_req` (the load generator's), its
  `extra.cgroup` (what the server's cgroup counted in the step) and the flag
  `throttled`; the summary's `cpu_us_per_req`, `cpu_us_per_req_ci`,
  `agent_cpu_us_per_req`, `memory_peak_bytes`, `cpu_ratio_to_nginx` and `cgroup` (mode
  v1, v2 or none and why, pinning, limits, throttling, OOM kills), and a connection ramp's
  `memory_per_connection_kb` (the cgroup's memory slope). A file from before them reads
  with them `null`: not measured.
  Also in /5, a connection ramp's closing step: the summary's `closing` (how the agents
  closed every connection at the ramp's end, `orderly` or `drop`, and the server's tick
  lag, GC and open connections while it closed them); `null` in a file from before it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from model.files import write_text_atomically
from model.ramps import CLOSE_MODES
from servers.contract import PROTOCOL_H1, PROTOCOLS, TLS_PROTOCOLS

SCHEMA = "harness.run/5"
SCHEMA_1 = "harness.run/1"
SCHEMA_2 = "harness.run/2"
SCHEMA_3 = "harness.run/3"
SCHEMA_4 = "harness.run/4"
READABLE_SCHEMAS = (SCHEMA_1, SCHEMA_2, SCHEMA_3, SCHEMA_4, SCHEMA)
CaseStatus = Literal["ok", "failed", "skipped"]
# running: under way (or the harness was killed outright before it could say otherwise);
# unknown: read from a /2 file that recorded no end
RunStatus = Literal["running", "complete", "interrupted", "failed", "unknown"]
RUN_STATUSES = ("running", "complete", "interrupted", "failed", "unknown")
STEP_UNITS = ("req/s", "conns", "concurrency")
PEAK_UNITS = ("req/s", "conns")
ROLES = ("framework", "baseline")
# every latency record has these keys (ms; None where not measured); percentiles by name
LATENCY_KEYS = ("avg", "p50", "p90", "p99", "p99.9", "p99.99", "max")
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9, "p99.99": 99.99}
# the histograms a step may keep (docs/results.md): same basis as latency_ms, and for
# open-loop drivers the same requests timed from their actual send
HISTOGRAM_NAMES = ("latency", "latency_uncorrected")
FLAG_MEANINGS = {
    "driver_bound": "the load generator limited the step (≥ 90 % of its CPUs, or httperf "
    "short of the rate asked) while the server was not saturated: the step measures the driver",
    "noisy": "repeats of this step spread by more than 10 %",
    "driver_capped": "the driver could not offer the load asked (e.g. httperf's 1,024 sockets)",
    "limit_capped": "an OS limit (open files, ephemeral ports), not the server, capped the step",
    "contended": "other processes used > 10 % of a core on the server's or the load's CPUs",
    "cpu_contended": "the server or the load generator waited >= 10 % of a core for a CPU "
    "another process held: the machine, not only the server, shaped the step",
    "step_lost": "the driver gave no figures for the step twice (it was retried once): the "
    "ramp has a hole there, and its case reads `incomplete`",
    "throttled": "the server's cgroup was held back by its CPU quota (--cpu-quota) in some "
    "of the step's CFS periods: extra.cgroup has the periods and the time",
    "imprecise": "the case's rounds stopped (time budget or max_rounds) before its peak's 95 % "
    "interval was within the precision asked: summary.imprecise_reason says how wide it is",
}
# where an imprecise case's spread comes from (harness.run.precision.noise_source)
NOISE_SOURCES = ("server", "load generator", "machine", "unknown")
# which side limited a step (harness.run.analysis.step_bottleneck)
BOTTLENECKS = ("server", "load generator", "database", "os limit", "none", "unknown")
# the summary's intervals: [low, high] at 95 % (harness.stats)
INTERVAL_FIELDS = (
    "peak_ci",
    "ratio_to_nginx_ci",
    "p99_at_peak_ci_ms",
    "server_cpu_at_peak_ci_pct",
    "tls_tax_ci",
    "cpu_us_per_req_ci",
)


def _finite(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, int | float) or not math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number, not {value!r}")


@dataclass(frozen=True)
class Step:
    """One ramp step against one framework."""

    offered: float
    unit: str
    achieved: float
    replies: int
    errors: dict[str, int]
    error_rate: float
    latency_ms: dict[str, float | None]
    server_cpu_pct: float | None = None
    agent_cpu_pct: float | None = None
    # open loop: the same requests timed from their actual send (the correction made visible)
    latency_uncorrected_ms: dict[str, float | None] | None = None
    histograms: dict[str, str] = field(default_factory=dict)  # name → base64 HdrHistogram (µs)
    rss_max_bytes: int | None = None
    tick_ms: dict[str, float | None] = field(default_factory=lambda: {"avg": None, "max": None})
    probe_ms: float | None = None
    flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # driver-specific (MB/s, ...)
    bottleneck: str | None = None  # one of BOTTLENECKS; None: not judged (connection ramps)
    # CPU µs per reply over the step: the server's (its cgroup's counter, or its process
    # tree's clocks: summary.cgroup says which) and the load generator's
    cpu_us_per_req: float | None = None
    agent_cpu_us_per_req: float | None = None

    def __post_init__(self) -> None:
        if self.bottleneck is not None and self.bottleneck not in BOTTLENECKS:
            raise ValueError(
                f"step bottleneck {self.bottleneck!r} is not one of {', '.join(BOTTLENECKS)}"
            )
        if self.unit not in STEP_UNITS:
            raise ValueError(f"step unit {self.unit!r} is not one of {', '.join(STEP_UNITS)}")
        for name in (
            "offered",
            "achieved",
            "error_rate",
            "server_cpu_pct",
            "agent_cpu_pct",
            "probe_ms",
            "cpu_us_per_req",
            "agent_cpu_us_per_req",
        ):
            _finite(name, getattr(self, name))
        if self.offered < 0 or self.achieved < 0 or self.replies < 0:
            raise ValueError(f"offered, achieved and replies must be >= 0 ({self})")
        if "total" not in self.errors:
            raise ValueError(f"errors must have a 'total', not {self.errors}")
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate must be within 0..1, not {self.error_rate}")
        missing = set(LATENCY_KEYS) - set(self.latency_ms)
        if missing:
            raise ValueError(f"latency_ms lacks {sorted(missing)}")
        if self.latency_uncorrected_ms is not None:
            missing = set(LATENCY_KEYS) - set(self.latency_uncorrected_ms)
            if missing:
                raise ValueError(f"latency_uncorrected_ms lacks {sorted(missing)}")
        unknown = set(self.histograms) - set(HISTOGRAM_NAMES)
        if unknown:
            raise ValueError(f"unknown histograms {sorted(unknown)}")
        for name, encoded in self.histograms.items():
            if not isinstance(encoded, str) or not encoded:
                raise ValueError(f"histogram {name!r} must be a non-empty base64 string")
        unknown = set(self.flags) - set(FLAG_MEANINGS)
        if unknown:
            raise ValueError(f"unknown step flags {sorted(unknown)}")


def _non_negative(name: str, value: float | None) -> None:
    _finite(name, value)
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
        _finite("memory_per_connection_bytes", self.memory_per_connection_bytes)
        _finite("memory_per_connection_kb", self.memory_per_connection_kb)
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
    return Summary(**{**data, **tuples})


@dataclass(frozen=True)
class Negotiated:
    """What a non-h1 case's server spoke, as the harness's probe connection found it
    right after the start (TLS: python `ssl`, trusting the run's CA; h2c: the protocol
    only), and whether the load generator checked the certificate."""

    protocol: str  # the case's protocol
    tls_version: str | None = None  # "TLSv1.3"; None for h2c
    cipher: str | None = None  # "TLS_AES_256_GCM_SHA384"
    key_type: str | None = None  # the served certificate's key: "ECDSA P-256", "RSA 2048"
    alpn: str | None = None  # the ALPN protocol the server selected; None: it selected none
    # whether the load generator verified the certificate against the run's CA (its driver
    # class's `ca_trusted`); None: cleartext, or the driver does not declare it
    ca_trusted: bool | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        tls = self.protocol in TLS_PROTOCOLS
        if not tls and any((self.tls_version, self.cipher, self.key_type, self.alpn)):
            raise ValueError(f"a {self.protocol} case negotiates no TLS: {self}")
        if self.ca_trusted is not None and not isinstance(self.ca_trusted, bool):
            raise ValueError(f"ca_trusted must be true, false or null, not {self.ca_trusted!r}")


@dataclass(frozen=True)
class Case:
    """One framework under one scenario, sink, driver, process model, affinity and
    protocol."""

    framework: str
    scenario: str
    sink: str
    driver: str
    process_model: str
    affinity: dict[str, str | None]
    status: CaseStatus
    error: str | None = None
    verify: dict[str, Any] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    summary: Summary = field(default_factory=Summary)
    reconcile: dict[str, int] | None = None
    rounds: tuple[Step, ...] = ()  # the confirmation rounds at the peak, in the order run
    protocol: str = PROTOCOL_H1  # servers.contract.PROTOCOLS: what the server spoke
    negotiated: Negotiated | None = None  # what the probe found (None: h1, or not started)

    def __post_init__(self) -> None:
        if self.status not in ("ok", "failed", "skipped"):
            raise ValueError(f"case status {self.status!r} is not ok, failed or skipped")
        if self.status != "ok" and not self.error:
            raise ValueError(f"a {self.status} case needs an error saying why")
        if not isinstance(self.summary, Summary):
            raise ValueError(f"summary must be a Summary, not {type(self.summary).__name__}")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.negotiated is not None and self.negotiated.protocol != self.protocol:
            raise ValueError(
                f"a {self.protocol} case negotiated {self.negotiated.protocol}: not one case"
            )

    @property
    def identity(self) -> tuple[str, str, str, str, str, str, str]:
        """What makes two cases, of one run or of two, the same case: framework, scenario,
        sink, driver, process model, affinity mode (`pinned` when none is recorded) and
        protocol."""
        mode = self.affinity.get("mode") or "pinned"
        return (
            self.framework,
            self.scenario,
            self.sink,
            self.driver,
            self.process_model,
            mode,
            self.protocol,
        )

    @property
    def deviations(self) -> list[dict[str, Any]]:
        """The robustness rules the server bent, as verify recorded them (each verify
        entry's `deviations`: check, key, sent, expected, came, declared — the server's
        reason, or null for a warning); [] for a run written before verify kept them."""
        return [
            deviation
            for entry in self.verify.values()
            if isinstance(entry, dict)
            for deviation in entry.get("deviations") or ()
        ]

    @property
    def warnings(self) -> int:
        """Deviations the server does not declare."""
        return sum(d.get("declared") is None for d in self.deviations)

    @property
    def lost_steps(self) -> int:
        """Steps (of the ramp and the rounds) that gave no figures even when retried."""
        return sum("step_lost" in step.flags for step in (*self.steps, *self.rounds))

    @property
    def status_text(self) -> str:
        """The status as a person reads it: `ok`, or `incomplete: 1 step lost` for an ok
        case with a hole in its ramp; `failed`/`skipped` as they are."""
        lost = self.lost_steps
        if self.status == "ok" and lost:
            return f"incomplete: {lost} step{'s' if lost > 1 else ''} lost"
        return self.status

    @property
    def key(self) -> str:
        """A directory-safe name unique within a run: the identity, `:` as `-`; an h1
        case leaves its protocol out (its key as before protocols were an axis)."""
        parts = self.identity if self.protocol != PROTOCOL_H1 else self.identity[:-1]
        return "_".join(str(part) for part in parts).replace(":", "-")


@dataclass(frozen=True)
class ThresholdResult:
    """One threshold rule judged against one case (model.thresholds says how)."""

    rule: str  # canonical: "aiohttp: peak >= 20000"
    framework: str
    case: str  # the case's key (a framework may have several cases)
    value: float | None  # the figure; None when it was not measured
    interval: tuple[float, float] | None  # its 95 % interval, when it has one
    held: bool
    # what was compared: "interval low end", "interval high end", "whole interval",
    # "value (no interval)", or why nothing could be ("case failed: …", "no value: …")
    judged_on: str

    def __post_init__(self) -> None:
        _finite("value", self.value)
        if self.interval is not None and (
            not isinstance(self.interval, tuple)
            or len(self.interval) != 2
            or not self.interval[0] <= self.interval[1]
        ):
            raise ValueError(f"interval must be a (low, high) pair, not {self.interval!r}")
        if not isinstance(self.held, bool):
            raise ValueError(f"threshold held must be true or false, not {self.held!r}")


def threshold_result_from_dict(data: dict[str, Any]) -> ThresholdResult:
    interval = data.get("interval")
    return ThresholdResult(**{**data, "interval": tuple(interval) if interval else None})


@dataclass(frozen=True)
class Run:
    """A whole comparison: host facts and versions that must agree before runs are combined."""

    run_id: str
    started: str
    finished: str | None
    host: dict[str, Any]
    versions: dict[str, Any]
    config: dict[str, Any]
    cases: tuple[Case, ...] = ()
    schema: str = SCHEMA
    status: RunStatus = "complete"
    status_reason: str | None = None  # why a run was interrupted or failed
    # the comparison in words and numbers (harness.run.verdict): `ranking` (groups whose
    # intervals do not separate them), `ratios` (each neighbour pair, with its interval),
    # `text` (one sentence); None when nothing was measured in rounds
    verdict: dict[str, Any] | None = None
    # every threshold rule (profile and --threshold) judged against each case it names;
    # empty when there were no rules
    thresholds: tuple[ThresholdResult, ...] = ()

    def __post_init__(self) -> None:
        if self.schema != SCHEMA:
            raise ValueError(f"schema {self.schema!r}: this harness writes {SCHEMA}")
        if not self.run_id:
            raise ValueError("run_id must not be empty")
        if self.status not in RUN_STATUSES:
            raise ValueError(f"run status {self.status!r} is not one of {', '.join(RUN_STATUSES)}")
        if self.status in ("interrupted", "failed") and not self.status_reason:
            raise ValueError(f"an {self.status} run needs a status_reason saying why")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        first = {key: data.pop(key) for key in ("schema", "run_id", "started", "finished")}
        ending = {key: data.pop(key) for key in ("status", "status_reason")}
        return {**first, **ending, **data}


def has_protocol_axis(cases: Sequence[Case]) -> bool:
    """Whether tables and figures name each case's protocol: a run (or runs) of more than
    one protocol, or of any but h1."""
    return {c.protocol for c in cases} not in (set(), {PROTOCOL_H1})


def step_from_dict(data: dict[str, Any]) -> Step:
    return Step(**{**data, "flags": tuple(data.get("flags", ()))})


def case_from_dict(data: dict[str, Any]) -> Case:
    negotiated = data.get("negotiated")
    return Case(
        **{
            **data,
            "steps": tuple(step_from_dict(s) for s in data.get("steps", ())),
            "rounds": tuple(step_from_dict(s) for s in data.get("rounds", ())),
            "summary": summary_from_dict(data.get("summary") or {}),
            "negotiated": Negotiated(**negotiated) if negotiated is not None else None,
        }
    )


def upgrade_run_1(data: dict[str, Any]) -> dict[str, Any]:
    """A harness.run/1 dict as harness.run/2: every summary field present, defaults filled.

    /1 wrote only the summary keys that applied (and `{}` or `{"peak": null}` for a case
    that measured nothing); /2 writes them all. Every /1 key keeps its name and meaning.
    """
    cases = []
    for case in data.get("cases", ()):
        summary = case.get("summary") or {}
        unknown = sorted(set(summary) - set(SUMMARY_FIELDS))
        if unknown:
            raise ValueError(f"{SCHEMA_1} summary of {case.get('framework')!r}: unknown {unknown}")
        filled = {**asdict(Summary()), **summary}
        for name in ("flags", "failed_repeats"):
            filled[name] = list(filled[name] or ())
        cases.append({**case, "summary": filled})
    return {**data, "schema": SCHEMA_2, "cases": cases}


def upgrade_run_2(data: dict[str, Any]) -> dict[str, Any]:
    """A harness.run/2 dict as harness.run/3: a status from what /2 recorded.

    /2 marked only a Ctrl-C (`config.interrupted`); a run it left without `finished` may
    have died in any way, or still be running: `unknown`.
    """
    config = dict(data.get("config") or {})
    interrupted = bool(config.pop("interrupted", False))
    if interrupted:
        status, reason = "interrupted", "stopped by Ctrl-C (SIGINT)"
    elif data.get("finished") is None:
        status, reason = "unknown", f"{SCHEMA_2} recorded no end: killed, failed or running"
    else:
        status, reason = "complete", None
    return {**data, "schema": SCHEMA_3, "config": config, "status": status, "status_reason": reason}


def upgrade_run_3(data: dict[str, Any]) -> dict[str, Any]:
    """A harness.run/3 dict as harness.run/4: the new percentiles `null`, no histograms, no rounds,
    no intervals, no verdict.

    /3 read only avg, p50, p90, p99 and max from the drivers and kept no histogram, so
    nothing is lost; `latency_uncorrected_ms` is `null` (no /3 driver was open-loop) and
    the summary's `knee` is filled with its default (`null`) when the summary is read.
    """
    cases = []
    for case in data.get("cases", ()):
        steps = []
        for step in case.get("steps", ()):
            latency = {**dict.fromkeys(LATENCY_KEYS), **(step.get("latency_ms") or {})}
            steps.append({**step, "latency_ms": latency})
        cases.append({**case, "steps": steps})
    return {**data, "schema": SCHEMA_4, "cases": cases}


def upgrade_run_4(data: dict[str, Any]) -> dict[str, Any]:
    """A harness.run/4 dict as harness.run/5: every case h1, nothing negotiated (/4 spoke
    cleartext HTTP/1.1 only; a /4 case that says otherwise is refused by name)."""
    cases = []
    for case in data.get("cases", ()):
        for name in ("protocol", "negotiated"):
            if name in case:
                raise ValueError(f"{SCHEMA_4} case of {case.get('framework')!r}: unknown {name!r}")
        cases.append({**case, "protocol": PROTOCOL_H1, "negotiated": None})
    return {**data, "schema": SCHEMA, "cases": cases}


# each readable older schema and the function that brings it one version forward
UPGRADES = {
    SCHEMA_1: upgrade_run_1,
    SCHEMA_2: upgrade_run_2,
    SCHEMA_3: upgrade_run_3,
    SCHEMA_4: upgrade_run_4,
}


def run_from_dict(data: dict[str, Any]) -> Run:
    """A Run from parsed JSON, older schemas upgraded; an unknown schema is refused by name."""
    schema = data.get("schema")
    if isinstance(schema, str) and schema.startswith("harness.bench/"):  # model.bench's
        raise ValueError(
            f"schema {schema!r} is a bench's (harness bench), not a comparison's: harness "
            "history, diff, trend --profile bench and publish read it"
        )
    if schema not in READABLE_SCHEMAS:
        raise ValueError(
            f"result schema {schema!r} is not readable by this harness "
            f"(it reads {', '.join(READABLE_SCHEMAS)})"
        )
    while data["schema"] in UPGRADES:
        data = UPGRADES[data["schema"]](data)
    run_fields = {k: v for k, v in data.items() if k not in ("cases", "thresholds")}
    return Run(
        **run_fields,
        cases=tuple(case_from_dict(c) for c in data.get("cases", ())),
        thresholds=tuple(threshold_result_from_dict(t) for t in data.get("thresholds", ())),
    )


def write_run(run: Run, directory: Path) -> Path:
    """Write `run.json` atomically (a reader never sees half a file)."""
    path = directory / "run.json"
    write_text_atomically(path, json.dumps(run.to_dict(), indent=2, sort_keys=False) + "\n")
    return path


# what read_run raises on a file that is not a readable run (bad JSON is a ValueError; a
# well-formed file of the wrong shape, a TypeError, KeyError or AttributeError)
READ_ERRORS = (OSError, ValueError, TypeError, KeyError, AttributeError)


def read_run(path: Path) -> Run:
    """Read `run.json` (or the directory holding it), upgrading an older schema's file."""
    if path.is_dir():
        path = path / "run.json"
    return run_from_dict(json.loads(path.read_text()))

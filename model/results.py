"""The result model, schema `harness.run/6`: Run → Case → Step and Summary, frozen and validated.

The format is described field by field in docs/results.md. Here: Run, Case, Negotiated,
ThresholdResult, and reading and writing run.json; a step is model.steps (its figures
model.step_figures), the summary model.summary, older schemas' upgraders model.upgrade.
Every name other modules import from here still is (`__all__`).

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
- harness.run/6 — a step's figures are typed: the free `extra` dict is gone, and a step
  (and a round) writes `figures`, an object whose fields model.step_figures.StepFigures
  declares (units in their names; fields that are null are left out). The fleet's,
  the cgroup's and the throttling's records keep their shapes; the handshakes driver's
  `extra.handshake_ms_p50` … `handshake_ms_max` are one record, `figures.handshake_ms`
  (`p50` … `max`, ms). Read from /5 by `upgrade_run_5`: every `extra` key moves into
  `figures` under its name (handshake_ms_* folded as above); a key no harness wrote
  is refused by name when the step is read (a figure without a declared meaning cannot
  be shown), as /1's unknown summary keys are.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from model.files import write_text_atomically
from model.step_figures import StepFigures, figures_to_dict
from model.steps import (
    BOTTLENECKS,
    FLAG_MEANINGS,
    HISTOGRAM_NAMES,
    LATENCY_KEYS,
    PERCENTILES,
    STEP_UNITS,
    Step,
    check_finite,
    step_from_dict,
)
from model.summary import (
    INTERVAL_FIELDS,
    NOISE_SOURCES,
    PEAK_UNITS,
    ROLES,
    SUMMARY_FIELDS,
    Summary,
    summary_from_dict,
)
from model.upgrade import (
    READABLE_SCHEMAS,
    SCHEMA,
    SCHEMA_1,
    SCHEMA_2,
    SCHEMA_3,
    SCHEMA_4,
    SCHEMA_5,
    UPGRADES,
    upgrade_run_1,
    upgrade_run_2,
    upgrade_run_3,
    upgrade_run_4,
    upgrade_run_5,
)
from servers.contract import PROTOCOL_H1, PROTOCOLS, TLS_PROTOCOLS

# what other modules import from here, wherever it is defined
__all__ = [
    "BOTTLENECKS",
    "FLAG_MEANINGS",
    "HISTOGRAM_NAMES",
    "INTERVAL_FIELDS",
    "LATENCY_KEYS",
    "NOISE_SOURCES",
    "PEAK_UNITS",
    "PERCENTILES",
    "READABLE_SCHEMAS",
    "READ_ERRORS",
    "ROLES",
    "RUN_STATUSES",
    "SCHEMA",
    "SCHEMA_1",
    "SCHEMA_2",
    "SCHEMA_3",
    "SCHEMA_4",
    "SCHEMA_5",
    "STEP_UNITS",
    "SUMMARY_FIELDS",
    "UPGRADES",
    "Case",
    "CaseStatus",
    "Negotiated",
    "Run",
    "RunStatus",
    "Step",
    "StepFigures",
    "Summary",
    "ThresholdResult",
    "case_from_dict",
    "has_protocol_axis",
    "read_run",
    "run_from_dict",
    "step_from_dict",
    "summary_from_dict",
    "threshold_result_from_dict",
    "upgrade_run_1",
    "upgrade_run_2",
    "upgrade_run_3",
    "upgrade_run_4",
    "upgrade_run_5",
    "write_run",
]

CaseStatus = Literal["ok", "failed", "skipped"]
# running: under way (or the harness was killed outright before it could say otherwise);
# unknown: read from a /2 file that recorded no end
RunStatus = Literal["running", "complete", "interrupted", "failed", "unknown"]
RUN_STATUSES = ("running", "complete", "interrupted", "failed", "unknown")


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
        check_finite("value", self.value)
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
        for case, written in zip(self.cases, data["cases"], strict=True):
            for name in ("steps", "rounds"):
                for step, step_data in zip(getattr(case, name), written[name], strict=True):
                    step_data["figures"] = figures_to_dict(step.figures)
        return {**first, **ending, **data}


def has_protocol_axis(cases: Sequence[Case]) -> bool:
    """Whether tables and figures name each case's protocol: a run (or runs) of more than
    one protocol, or of any but h1."""
    return {c.protocol for c in cases} not in (set(), {PROTOCOL_H1})


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

"""The bench result model, schema `harness.bench/1`: BenchRun → BenchCase → BenchFigure,
frozen and validated.

A bench run (`harness bench http`, `harness bench ws`) measures our server against its
framework's minimal app in paired rounds (round i ran both, seconds apart) and keeps, per
framework and protocol, one BenchFigure per measured quantity: each round's value for
ours and for the minimal app, the paired ratio ours / minimal with its 95 % interval and
the verdict against the bench's limit. Its run.json lives beside compare's under the
results root, in a directory of its own (`<UTC start>-bench` / `-bench-ws`).

It is its own schema, not a harness.run/N: a reader of compare runs refuses a bench file
by its schema's name (model.results.run_from_dict), and this module refuses a file of
any schema it does not know (`bench_run_from_dict`).

Format history (bump BENCH_SCHEMA on any change; older files are upgraded or refused by name):
- harness.bench/1 — first version: `kind` (http or ws), run id, start and end, status,
  host facts, versions, the options (`config`) and the cases.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from model.files import write_text_atomically
from model.results import Run, run_from_dict
from servers.contract import PROTOCOL_H1, PROTOCOLS

BENCH_SCHEMA = "harness.bench/1"
READABLE_BENCH_SCHEMAS = (BENCH_SCHEMA,)
BENCH_SCHEMA_PREFIX = "harness.bench/"
BenchKind = Literal["http", "ws"]
BENCH_KINDS = ("http", "ws")
# the profile-like name a bench run's id ends with, and `harness trend --profile` takes
BENCH_PROFILES = {"http": "bench", "ws": "bench-ws"}
BENCH_STATUSES = ("running", "complete", "interrupted", "failed")
# within: the ratio's interval lies wholly on the good side of the limit; outside: wholly
# on the other; undecided: it straddles the limit, or there is no interval
VERDICTS = ("within", "outside", "undecided")
BETTER = ("higher", "lower")


def _check_interval(name: str, interval: tuple[float, float] | None) -> None:
    if interval is None:
        return
    if len(interval) != 2 or not all(math.isfinite(v) and v > 0 for v in interval):
        raise ValueError(f"{name} must be two positive finite numbers, not {interval!r}")
    if interval[0] > interval[1]:
        raise ValueError(f"{name} {interval!r}: low above high")


def _mean(values: tuple[float | None, ...]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True)
class BenchFigure:
    """One quantity of one bench case: each round's value of ours and of the minimal app
    (round i: `ours[i]`, `minimal[i]`; None where a round gave none), the paired ratio
    ours / minimal with its 95 % interval, and the verdict against `limit`."""

    name: str  # req/s, KB/conn, RSS KB/conn, CPU µs/conn
    better: str  # higher or lower: which way of the ratio is good
    limit: float  # the ratio the verdict is judged against (0.95: at least; 1.25: at most)
    ours: tuple[float | None, ...]
    minimal: tuple[float | None, ...]
    ratio: float | None
    ratio_ci: tuple[float, float] | None  # 95 %, from the paired rounds
    verdict: str
    reason: str | None = None  # why undecided (or what makes the figure partial)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a bench figure needs a name")
        if self.better not in BETTER:
            raise ValueError(f"better {self.better!r} is not one of {', '.join(BETTER)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if len(self.ours) != len(self.minimal):
            raise ValueError(
                f"{self.name}: {len(self.ours)} rounds of ours and {len(self.minimal)} of "
                "minimal: rounds come in pairs"
            )
        for value in (*self.ours, *self.minimal, self.ratio, self.limit):
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{self.name}: {value!r} is not a finite number >= 0")
        _check_interval(f"{self.name} ratio_ci", self.ratio_ci)

    @property
    def round_ratios(self) -> list[float]:
        """ours / minimal of each round where both gave a positive value."""
        return [
            a / b
            for a, b in zip(self.ours, self.minimal, strict=True)
            if a is not None and b is not None and a > 0 and b > 0
        ]

    @property
    def ours_mean(self) -> float | None:
        """The mean of ours over the rounds that gave a value."""
        return _mean(self.ours)

    @property
    def minimal_mean(self) -> float | None:
        """The mean of the minimal app over the rounds that gave a value."""
        return _mean(self.minimal)

    @property
    def limit_text(self) -> str:
        """`≥ 0.95×` or `≤ 1.25×`: what the verdict asks of the ratio."""
        return f"{'≥' if self.better == 'higher' else '≤'} {self.limit:g}×"


@dataclass(frozen=True)
class BenchCase:
    """One framework on one protocol: its figures over the paired rounds."""

    framework: str
    loop: str | None
    protocol: str
    rounds: int
    figures: tuple[BenchFigure, ...]
    # what else the bench recorded of the case (ws: connections, workers, sources,
    # connections held and failed; http: the precision asked and whether it was reached)
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.framework:
            raise ValueError("a bench case needs a framework")
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol {self.protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if self.rounds < 0:
            raise ValueError(f"rounds must be >= 0, not {self.rounds}")
        if not self.figures:
            raise ValueError(f"bench case {self.framework}: no figures")
        for figure in self.figures:
            if len(figure.ours) != self.rounds:
                raise ValueError(
                    f"bench case {self.framework} {figure.name}: {len(figure.ours)} rounds "
                    f"of {self.rounds}"
                )

    @property
    def key(self) -> tuple[str, str]:
        """What matches a case across runs: framework and protocol."""
        return (self.framework, self.protocol)

    @property
    def label(self) -> str:
        return (
            self.framework
            if self.protocol == PROTOCOL_H1
            else f"{self.framework} [{self.protocol}]"
        )

    def figure(self, name: str) -> BenchFigure | None:
        return next((f for f in self.figures if f.name == name), None)


@dataclass(frozen=True)
class BenchRun:
    """A whole bench: host facts and versions that must agree before runs are combined."""

    kind: str  # http or ws
    run_id: str
    started: str
    finished: str | None
    host: dict[str, Any]
    versions: dict[str, Any]
    config: dict[str, Any]
    cases: tuple[BenchCase, ...] = ()
    schema: str = BENCH_SCHEMA
    status: str = "complete"
    status_reason: str | None = None  # why a run was interrupted or failed

    def __post_init__(self) -> None:
        if self.schema != BENCH_SCHEMA:
            raise ValueError(f"schema {self.schema!r}: this harness writes {BENCH_SCHEMA}")
        if self.kind not in BENCH_KINDS:
            raise ValueError(f"bench kind {self.kind!r} is not one of {', '.join(BENCH_KINDS)}")
        if not self.run_id:
            raise ValueError("run_id must not be empty")
        if self.status not in BENCH_STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(BENCH_STATUSES)}")
        if self.status in ("interrupted", "failed") and not self.status_reason:
            raise ValueError(f"status {self.status} needs a status_reason saying why")
        keys = [c.key for c in self.cases]
        if len(keys) != len(set(keys)):
            raise ValueError(f"bench {self.run_id}: a framework and protocol twice")

    @property
    def profile(self) -> str:
        """`bench` or `bench-ws`: what the run's id ends with."""
        return BENCH_PROFILES[self.kind]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        first = {key: data.pop(key) for key in ("schema", "kind", "run_id", "started", "finished")}
        ending = {key: data.pop(key) for key in ("status", "status_reason")}
        return {**first, **ending, **data}


def judge(
    interval: tuple[float, float] | None, limit: float, better: str
) -> tuple[str, str | None]:
    """The verdict of a ratio's 95 % interval against `limit`: `within` when it lies
    wholly on the good side (`better`: higher, at or above the limit; lower, at or under
    it), `outside` when wholly on the other, else `undecided` with the reason."""
    if interval is None:
        return "undecided", "no interval: fewer than two rounds with both figures"
    low, high = interval
    good, bad = (low >= limit, high < limit) if better == "higher" else (high <= limit, low > limit)
    if good:
        return "within", None
    if bad:
        return "outside", None
    return "undecided", (
        f"the 95 % interval [{low:.2f}, {high:.2f}] straddles {limit:g}×: more rounds narrow it"
    )


def is_bench_schema(schema: object) -> bool:
    """Whether a run.json's `schema` names a bench (of any version)."""
    return isinstance(schema, str) and schema.startswith(BENCH_SCHEMA_PREFIX)


def _pair(value: Any) -> tuple[float, float] | None:
    return tuple(value) if value is not None else None  # type: ignore[return-value]


def bench_figure_from_dict(data: dict[str, Any]) -> BenchFigure:
    return BenchFigure(
        **{
            **data,
            "ours": tuple(data["ours"]),
            "minimal": tuple(data["minimal"]),
            "ratio_ci": _pair(data.get("ratio_ci")),
        }
    )


def bench_case_from_dict(data: dict[str, Any]) -> BenchCase:
    figures = tuple(bench_figure_from_dict(f) for f in data["figures"])
    return BenchCase(**{**data, "figures": figures})


def bench_run_from_dict(data: dict[str, Any]) -> BenchRun:
    """A BenchRun from parsed JSON; a schema this harness does not read is refused by name."""
    schema = data.get("schema")
    if schema not in READABLE_BENCH_SCHEMAS:
        raise ValueError(
            f"bench schema {schema!r} is not readable by this harness "
            f"(it reads {', '.join(READABLE_BENCH_SCHEMAS)})"
        )
    cases = tuple(bench_case_from_dict(c) for c in data.get("cases", ()))
    return BenchRun(**{**data, "cases": cases})


def write_bench_run(run: BenchRun, directory: Path) -> Path:
    """Write `run.json` atomically (a reader never sees half a file)."""
    path = directory / "run.json"
    write_text_atomically(path, json.dumps(run.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return path


def read_bench_run(path: Path) -> BenchRun:
    """Read a bench's `run.json` (or the directory holding it)."""
    if path.is_dir():
        path = path / "run.json"
    return bench_run_from_dict(json.loads(path.read_text()))


def read_result(path: Path) -> Run | BenchRun:
    """Read any `run.json` under the results root (or the directory holding it): a
    compare run (model.results, older schemas upgraded) or a bench, told by its schema;
    a schema neither knows is refused by name."""
    if path.is_dir():
        path = path / "run.json"
    data = json.loads(path.read_text())
    if isinstance(data, dict) and is_bench_schema(data.get("schema")):
        return bench_run_from_dict(data)
    return run_from_dict(data)

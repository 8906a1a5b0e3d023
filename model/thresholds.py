"""Thresholds: rules a run must meet (`aiohttp: peak >= 20000`), parsed and judged.

A rule is `FRAMEWORK: METRIC OP NUMBER`, FRAMEWORK a framework's name or `*` (every case
that ran), OP one of `>=`, `>`, `<=`, `<`, `==`. FRAMEWORK may name one protocol in
brackets: `aiohttp[h1-tls]: peak >= 10000` judges aiohttp's h1-tls cases only, `*[h2]:`
every h2 case; a plain `aiohttp:` judges every case of aiohttp, whatever its protocol.
Rules come from a profile's `[thresholds]` table (`rules = [...]`) and from `--threshold`
on `harness compare` and `harness run`; each case a rule names gets a `ThresholdResult`
in `run.json`.

**Judged on the interval.** With confirmation rounds a figure carries a 95 % interval,
and a rule holds only when the whole interval meets it: `>=` and `>` are judged on the
interval's low end, `<=` and `<` on its high end, `==` on both ends. So a rule holds only
when the rounds leave no reasonable doubt, and a CI gate built on it does not flap on a
noisy round. A figure without an interval (no rounds; `errors` and `lost` are counts) is
judged on its value, and the result says so (`judged_on`).

A rule does not hold on a case that failed (whatever the figure, the server did not
serve), nor on a figure that was not measured (no peak, no nginx beside it); a rule
naming a framework holds nowhere when that framework's case was skipped, and judges
nothing when the framework was not in the run (`unmatched`). `*` leaves out skipped cases
(not installed, or a route or sink not served).

Pure: no I/O, no clock; the parser raises ValueError with one line naming the bad rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from model.results import Case, ThresholdResult
from servers.contract import PROTOCOLS

OPERATORS = (">=", "<=", "==", ">", "<")
RULE_SHAPE = (
    "FRAMEWORK: METRIC OP NUMBER (e.g. 'aiohttp: peak >= 20000', '*: errors == 0'; "
    "one protocol's cases: 'aiohttp[h1-tls]: peak >= 10000')"
)
_RULE = re.compile(
    r"^\s*(?P<who>[^:\s\[\]]+)(?:\[(?P<protocol>[^\]\s]*)\])?\s*:\s*"
    r"(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>[<>=!]=?)\s*(?P<bound>\S+)\s*$"
)

Figure = tuple[float | None, tuple[float, float] | None, str | None]


def _peak(case: Case) -> Figure:
    return case.summary.peak, case.summary.peak_ci, None


def _ratio_to_nginx(case: Case) -> Figure:
    summary = case.summary
    why = None if summary.ratio_to_nginx is not None else "no nginx peak beside it"
    return summary.ratio_to_nginx, summary.ratio_to_nginx_ci, why


def _p99(case: Case) -> Figure:
    return case.summary.p99_at_peak_ms, case.summary.p99_at_peak_ci_ms, None


def _server_cpu(case: Case) -> Figure:
    return case.summary.server_cpu_at_peak_pct, case.summary.server_cpu_at_peak_ci_pct, None


def _tls_tax(case: Case) -> Figure:
    summary = case.summary
    why = None if summary.tls_tax is not None else "no h1-tls case with an h1 case beside it"
    return summary.tls_tax, summary.tls_tax_ci, why


def _cpu_us_per_req(case: Case) -> Figure:
    summary = case.summary
    why = None if summary.cpu_us_per_req is not None else "no server CPU per reply measured"
    return summary.cpu_us_per_req, summary.cpu_us_per_req_ci, why


def _memory_peak_mb(case: Case) -> Figure:
    peak = case.summary.memory_peak_bytes
    why = None if peak is not None else "no memory peak measured"
    return (peak / 1e6 if peak is not None else None), None, why


def _errors(case: Case) -> Figure:
    # every error the case saw: the ramp's steps (the summary's errors_total) and its rounds
    errors = case.summary.errors_total + sum(s.errors["total"] for s in case.rounds)
    return float(errors), None, None


def _lost(case: Case) -> Figure:
    if case.reconcile is None:  # a scenario that stores no records acknowledged none
        return 0.0, None, None
    return float(case.reconcile.get("lost", 0)), None, None


# metric name → (what it is, how to read it from a case: value, interval, why no value)
METRICS: dict[str, tuple[str, Callable[[Case], Figure]]] = {
    "peak": ("the peak (req/s, or connections held)", _peak),
    "ratio_to_nginx": ("the peak as a ratio to nginx's in the same run", _ratio_to_nginx),
    "p99_ms": ("p99 latency at the peak, ms", _p99),
    "server_cpu_pct": ("server CPU at the peak, % of one core", _server_cpu),
    "tls_tax": ("h1-tls cases: the peak over the same server's h1 peak", _tls_tax),
    "cpu_us_per_req": ("the server's CPU per reply at the peak, µs (its cgroup)", _cpu_us_per_req),
    "memory_peak_mb": ("the server's memory peak over the case, MB (its cgroup)", _memory_peak_mb),
    "errors": ("errors over every ramp step and round", _errors),
    "lost": ("acknowledged records the sink does not hold (reconcile.lost)", _lost),
}


def _number_text(number: float) -> str:
    return str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)


@dataclass(frozen=True)
class Threshold:
    """One parsed rule."""

    framework: str  # a framework's name, or "*"
    metric: str
    op: str
    bound: float
    protocol: str | None = None  # one protocol's cases only (None: every protocol)

    @property
    def text(self) -> str:
        """The rule written canonically: `aiohttp: peak >= 20000`, `aiohttp[h2]: …`."""
        who = self.framework + (f"[{self.protocol}]" if self.protocol else "")
        return f"{who}: {self.metric} {self.op} {_number_text(self.bound)}"

    def matches(self, case: Case) -> bool:
        """The rule applies to `case` (`*`: every case that was not skipped), of its
        protocol when it names one."""
        if self.protocol is not None and case.protocol != self.protocol:
            return False
        if self.framework == "*":
            return case.status != "skipped"
        return case.framework == self.framework


def parse_threshold(text: str, frameworks: Collection[str] | None = None) -> Threshold:
    """`aiohttp: peak >= 20000` as a Threshold; ValueError naming the rule and what is
    wrong with it. With `frameworks`, a name outside it (other than `*`) is refused."""
    match = _RULE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"threshold {text!r} is not like {RULE_SHAPE}")
    who, protocol, metric, op, bound_text = match.group("who", "protocol", "metric", "op", "bound")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(
            f"threshold {text!r}: unknown protocol {protocol!r}: choose from {', '.join(PROTOCOLS)}"
        )
    if frameworks is not None and who != "*" and who not in frameworks:
        raise ValueError(
            f"threshold {text!r}: unknown framework {who!r}: choose from *, "
            + ", ".join(frameworks)
        )
    if metric not in METRICS:
        raise ValueError(
            f"threshold {text!r}: unknown metric {metric!r}: choose from {', '.join(METRICS)}"
        )
    if op not in OPERATORS:
        raise ValueError(
            f"threshold {text!r}: unknown comparison {op!r}: choose from {', '.join(OPERATORS)}"
        )
    try:
        bound = float(bound_text)
    except ValueError:
        raise ValueError(f"threshold {text!r}: {bound_text!r} is not a number") from None
    if not math.isfinite(bound):
        raise ValueError(f"threshold {text!r}: the bound must be a finite number")
    return Threshold(who, metric, op, bound, protocol)


def _compare(x: float, op: str, bound: float) -> bool:
    return {
        ">=": x >= bound,
        ">": x > bound,
        "<=": x <= bound,
        "<": x < bound,
        "==": x == bound,
    }[op]


def judge(rule: Threshold, case: Case) -> ThresholdResult:
    """Whether `case` meets `rule`, judged on the interval when there is one."""
    value, interval, why_none = METRICS[rule.metric][1](case)

    def result(held: bool, judged_on: str) -> ThresholdResult:
        return ThresholdResult(
            rule=rule.text,
            framework=case.framework,
            case=case.key,
            value=value,
            interval=interval,
            held=held,
            judged_on=judged_on,
        )

    if case.status != "ok":
        return result(False, f"case {case.status}: {case.error or ''}".strip())
    if value is None:
        return result(False, f"no value: {why_none or 'not measured'}")
    if interval is None:
        return result(_compare(value, rule.op, rule.bound), "value (no interval)")
    low, high = interval
    if rule.op in (">=", ">"):
        return result(_compare(low, rule.op, rule.bound), "interval low end")
    if rule.op in ("<=", "<"):
        return result(_compare(high, rule.op, rule.bound), "interval high end")
    return result(low == high == rule.bound, "whole interval")


def judge_thresholds(
    rules: Sequence[Threshold], cases: Sequence[Case]
) -> tuple[ThresholdResult, ...]:
    """Every rule against every case it matches, in rule order."""
    return tuple(judge(rule, case) for rule in rules for case in cases if rule.matches(case))


def unmatched(rules: Sequence[Threshold], cases: Sequence[Case]) -> list[Threshold]:
    """The rules that matched no case (a framework not in the run)."""
    return [rule for rule in rules if not any(rule.matches(case) for case in cases)]

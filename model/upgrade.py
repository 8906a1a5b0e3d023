"""Reading older run.json files: each readable older schema and the function that brings
it one version forward (model.results's docstring has the format history)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from model.steps import LATENCY_KEYS
from model.summary import SUMMARY_FIELDS, Summary
from servers.contract import PROTOCOL_H1

SCHEMA = "harness.run/6"
SCHEMA_1 = "harness.run/1"
SCHEMA_2 = "harness.run/2"
SCHEMA_3 = "harness.run/3"
SCHEMA_4 = "harness.run/4"
SCHEMA_5 = "harness.run/5"
READABLE_SCHEMAS = (SCHEMA_1, SCHEMA_2, SCHEMA_3, SCHEMA_4, SCHEMA_5, SCHEMA)


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
    return {**data, "schema": SCHEMA_5, "cases": cases}


# the /5 `extra` keys of the handshakes driver that /6 keeps as one `handshake_ms` record
_HANDSHAKE_PREFIX = "handshake_ms_"


def figures_of_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """A /5 step's `extra` as a /6 step's `figures`: every key keeps its name and meaning,
    but `handshake_ms_<key>` become `handshake_ms` {<key>: ms}. A key no harness wrote is
    left for model.step_figures.figures_from_dict to refuse by name."""
    figures = {k: v for k, v in extra.items() if not k.startswith(_HANDSHAKE_PREFIX)}
    handshake = {
        k.removeprefix(_HANDSHAKE_PREFIX): v
        for k, v in extra.items()
        if k.startswith(_HANDSHAKE_PREFIX)
    }
    if handshake:
        figures["handshake_ms"] = {**dict.fromkeys(LATENCY_KEYS), **handshake}
    return figures


def upgrade_run_5(data: dict[str, Any]) -> dict[str, Any]:
    """A harness.run/5 dict as harness.run/6: each step's (and round's) free `extra` dict
    becomes its typed `figures` (model.step_figures.StepFigures)."""

    def upgraded(step: dict[str, Any]) -> dict[str, Any]:
        moved = {k: v for k, v in step.items() if k != "extra"}
        return {**moved, "figures": figures_of_extra(step.get("extra") or {})}

    cases = [
        {
            **case,
            "steps": [upgraded(s) for s in case.get("steps", ())],
            "rounds": [upgraded(s) for s in case.get("rounds", ())],
        }
        for case in data.get("cases", ())
    ]
    return {**data, "schema": SCHEMA, "cases": cases}


# each readable older schema and the function that brings it one version forward
UPGRADES = {
    SCHEMA_1: upgrade_run_1,
    SCHEMA_2: upgrade_run_2,
    SCHEMA_3: upgrade_run_3,
    SCHEMA_4: upgrade_run_4,
    SCHEMA_5: upgrade_run_5,
}

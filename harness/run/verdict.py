"""The comparison in words: a ranking that admits ties, neighbour ratios with intervals.

Within each comparable set (same scenario, sink, driver, affinity mode, process model and
protocol),
cases are sorted by peak. A case joins the group of the one ranked above it when it
cannot be told apart from the group's leader: their paired-round ratio's 95 % interval
contains 1.0 (harness.stats). So "twisted ≈ node-express" means the rounds do not separate
them; "aiohttp > twisted (1.27× [1.19, 1.35])" means they do, by that much. Without rounds
there is no interval, every case stands alone and the verdict says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from charts.columns import figure_text
from harness.run.round_figures import round_ratio
from harness.stats import Interval
from model.results import Case


def comparable_key(case: Case) -> tuple[str, ...]:
    """The comparable set a case belongs to: its identity without the framework (scenario,
    sink, driver, process model, affinity mode, protocol)."""
    return case.identity[1:]


def _ratio_text(interval: Interval) -> str:
    return figure_text(interval.value, interval.as_pair(), spec="{:.2f}", suffix="×")


def rank(cases: Sequence[Case]) -> list[list[Case]]:
    """Groups of cases in descending peak; within a group no interval separates a case
    from the group's leader."""
    ranked = sorted(
        (c for c in cases if c.status == "ok" and c.summary.peak is not None),
        key=lambda c: -float(c.summary.peak or 0),
    )
    groups: list[list[Case]] = []
    for case in ranked:
        if groups:
            ratio = round_ratio(groups[-1][0], case)
            if ratio is not None and not ratio.excludes(1.0):
                groups[-1].append(case)
                continue
        groups.append([case])
    return groups


def verdict(cases: Sequence[Case]) -> dict[str, Any] | None:
    """The run's verdict (Run.verdict): per comparable set, the ranking in groups, each
    neighbour ratio with its interval, and one sentence; None if nothing peaked."""
    sets: dict[tuple[str, ...], list[Case]] = {}
    for case in cases:
        sets.setdefault(comparable_key(case), []).append(case)
    parts = []
    for key, members in sets.items():
        groups = rank(members)
        if not groups:
            continue
        ratios = []
        ordered = [c for group in groups for c in group]
        for upper, lower in itertools.pairwise(ordered):
            interval = round_ratio(upper, lower)
            ratios.append(
                {
                    "a": upper.framework,
                    "b": lower.framework,
                    "ratio": round(interval.value, 3) if interval else None,
                    "ci": list(interval.rounded(3).as_pair()) if interval else None,
                    "separated": bool(interval and interval.excludes(1.0)),
                }
            )
        parts.append(
            {
                "scenario": key[0],
                "sink": key[1],
                "driver": key[2],
                "process_model": key[3],
                "affinity": key[4],
                "protocol": key[5],
                "ranking": [[c.framework for c in group] for group in groups],
                "ratios": ratios,
                "text": sentence(groups),
            }
        )
    if not parts:
        return None
    return {"sets": parts, "text": " | ".join(part["text"] for part in parts)}


def sentence(groups: list[list[Case]]) -> str:
    """ "nginx > node-http (nginx/node-http 1.10× [1.05, 1.15]) > aiohttp ≈ twisted (…)":
    each gap is given as the ratio of the two groups' leaders, the pair whose interval
    made the split; without rounds, the ranking by peak alone, said to have no intervals."""
    if not any(c.rounds for group in groups for c in group):
        names = " > ".join(c.framework for group in groups for c in group)
        return f"{names} (by peak; no rounds, so no intervals)"
    text = " ≈ ".join(c.framework for c in groups[0])
    for upper, lower in itertools.pairwise(groups):
        interval = round_ratio(upper[0], lower[0])
        names = f"{upper[0].framework}/{lower[0].framework}"
        gap = f" ({names} {_ratio_text(interval)})" if interval else ""
        text += " > " + " ≈ ".join(c.framework for c in lower) + gap
    return text

"""`harness crosscheck`: our ratios beside the ones the public boards published.

The published ratios live in published.toml beside this module (board, date, test,
figure, URL, and how we measure the same test here). For each (scenario, concurrency)
the pairs need, one comparison runs the servers involved with the `boards` profile's
shape at that one concurrency, in rounds; a pair's ratio is the numerator's rounds over
the denominator's, paired round by round (harness.run.analysis.round_ratio), with its
95 % interval. The verdict holds the published figure against that interval widened by
the file's band.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from harness.run.analysis import round_ratio
from harness.stats import Interval
from model.crosscheck import (
    AGREES,
    DISAGREES,
    INCONCLUSIVE,
    NOT_MEASURED,
    Crosscheck,
    PublishedPair,
    Ratio,
)
from model.errors import UserError
from model.results import Case, Run

PUBLISHED_PATH = Path(__file__).resolve().parent / "published.toml"
PUBLISHED_VERSION = 1  # published.toml's `version`: a file of another is refused by name
__all__ = [
    "AGREES",
    "DISAGREES",
    "INCONCLUSIVE",
    "NOT_MEASURED",
    "Crosscheck",
    "Published",
    "PublishedPair",
]


@dataclass(frozen=True)
class Published:
    """published.toml: the agreement band (a fraction) and the pairs."""

    band: float
    pairs: tuple[PublishedPair, ...]


def load_published(path: Path = PUBLISHED_PATH) -> Published:
    """The published ratios; ValueError naming what is wrong (an unknown version, a field)."""
    data = tomllib.loads(path.read_text())
    if data.get("version") != PUBLISHED_VERSION:
        raise ValueError(
            f"{path}: version {data.get('version')!r} is not {PUBLISHED_VERSION}, the one read"
        )
    band = data.get("band")
    if not isinstance(band, int | float) or not 0 < band < 10:
        raise ValueError(f"{path}: band must be a positive fraction, not {band!r}")
    names = {f.name for f in fields(PublishedPair)}
    pairs = []
    for entry in data.get("pair", []):
        unknown = sorted(set(entry) - names)
        if unknown:
            raise ValueError(f"{path}: unknown pair fields {unknown}")
        pairs.append(PublishedPair(**entry))
    return Published(float(band), tuple(pairs))


def measurements(pairs: Sequence[PublishedPair]) -> dict[tuple[str, int], list[str]]:
    """(scenario, concurrency) -> the servers the pairs need measured there, in order."""
    groups: dict[tuple[str, int], list[str]] = {}
    for pair in pairs:
        servers = groups.setdefault((pair.scenario, pair.concurrency), [])
        for name in (pair.numerator, pair.denominator):
            if name not in servers:
                servers.append(name)
    return groups


def judge(
    pair: PublishedPair, ours: Interval | None, band: float, missing: str = "", run_id: str = ""
) -> Crosscheck:
    """The verdict: agrees when the published ratio lies in our interval widened by `band`
    (low / (1 + band), high × (1 + band)); else disagrees (what differs from the board's
    run is the pair's own `differs`, a column of every table). An interval wider than the
    band's own span ((1 + band)², high / low) can agree with almost any figure:
    inconclusive, whatever the published figure is."""
    if ours is None:
        why = missing or "no ratio: fewer than two rounds"
        return Crosscheck(pair, None, NOT_MEASURED, why, run_id)
    ratio = Ratio(ours.value, ours.low, ours.high)
    low, high = ours.low / (1 + band), ours.high * (1 + band)
    if ours.low <= 0 or ours.high / ours.low > (1 + band) ** 2:
        why = (
            f"our interval [{ours.low:.2f}, {ours.high:.2f}] is wider than the band "
            f"({(1 + band) ** 2:.2f}×): more or longer rounds (--rounds, --round-duration), "
            "a quieter host"
        )
        return Crosscheck(pair, ratio, INCONCLUSIVE, why, run_id)
    if low <= pair.published <= high:
        why = f"{pair.published:g} within [{low:.2f}, {high:.2f}] (ours ± the band {band:.0%})"
        return Crosscheck(pair, ratio, AGREES, why, run_id)
    side = "above" if pair.published > high else "below"
    why = f"{pair.published:g} {side} [{low:.2f}, {high:.2f}]"
    return Crosscheck(pair, ratio, DISAGREES, why, run_id)


def _case(run: Run, framework: str) -> Case | None:
    return next((c for c in run.cases if c.framework == framework and c.status == "ok"), None)


def pair_ratio(run: Run, pair: PublishedPair) -> tuple[Interval | None, str]:
    """The pair's ratio from a run of its scenario, or None and why."""
    numerator, denominator = _case(run, pair.numerator), _case(run, pair.denominator)
    for name, case in ((pair.numerator, numerator), (pair.denominator, denominator)):
        if case is None:
            failed = next((c for c in run.cases if c.framework == name), None)
            return None, f"{name}: {failed.error if failed else 'not run'}"
    assert numerator is not None and denominator is not None
    return round_ratio(numerator, denominator), ""


def crosscheck(
    published: Published,
    measure: Callable[[str, int, list[str]], Run | str],
) -> list[Crosscheck]:
    """Every pair judged; `measure(scenario, concurrency, servers)` runs one comparison
    and returns its Run, or a string saying why it could not."""
    runs = {key: measure(*key, servers) for key, servers in measurements(published.pairs).items()}
    results = []
    for pair in published.pairs:
        run = runs[(pair.scenario, pair.concurrency)]
        if isinstance(run, str):
            results.append(judge(pair, None, published.band, run))
            continue
        ours, missing = pair_ratio(run, pair)
        results.append(judge(pair, ours, published.band, missing, run.run_id))
    return results


def require_pairs(published: Published, only: str | None) -> Published:
    """The pairs whose test or servers `only` (a comma list) names; all when None."""
    if not only:
        return published
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    pairs = tuple(
        p for p in published.pairs if wanted & {p.test, p.scenario, p.numerator, p.denominator}
    )
    if not pairs:
        tests = sorted({p.test for p in published.pairs})
        raise UserError(f"--only {only}: no published pair matches; tests: {', '.join(tests)}")
    return Published(published.band, pairs)

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
from typing import Any

from harness.run.analysis import round_ratio
from harness.stats import Interval
from model.errors import UserError
from model.figures import figure
from model.results import Case, Run
from model.scenarios import SCENARIOS

PUBLISHED_PATH = Path(__file__).resolve().parent / "published.toml"
PUBLISHED_VERSION = 1  # published.toml's `version`: a file of another is refused by name
AGREES, DISAGREES, NOT_MEASURED = "agrees", "disagrees", "not measured"
INCONCLUSIVE = "inconclusive"
HEADERS = ("pair", "board", "test", "ours [95 % CI]", "published", "verdict", "source")


@dataclass(frozen=True)
class PublishedPair:
    """One ratio a board published, and the scenario and concurrency that measure it here."""

    board: str
    date: str
    test: str
    numerator: str
    denominator: str
    published: float
    url: str
    scenario: str
    concurrency: int
    differs: str

    def __post_init__(self) -> None:
        if not self.published > 0:
            raise ValueError(
                f"{self.test}: published must be a positive ratio, not {self.published}"
            )
        if self.scenario not in SCENARIOS:
            raise ValueError(f"{self.test}: unknown scenario {self.scenario!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"{self.test}: concurrency must be a whole number >= 1")
        if self.numerator == self.denominator:
            raise ValueError(f"{self.test}: a pair needs two servers, not {self.numerator} twice")

    @property
    def label(self) -> str:
        return f"{self.numerator} / {self.denominator}"


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


@dataclass(frozen=True)
class Crosscheck:
    """One published pair beside ours: our ratio (None: not measured), the verdict, why."""

    pair: PublishedPair
    ours: Interval | None
    verdict: str
    why: str


def judge(pair: PublishedPair, ours: Interval | None, band: float, missing: str = "") -> Crosscheck:
    """The verdict: agrees when the published ratio lies in our interval widened by `band`
    (low / (1 + band), high × (1 + band)); else disagrees, saying what differs. An interval
    wider than the band's own span ((1 + band)², high / low) can agree with almost any
    figure: inconclusive, whatever the published figure is."""
    if ours is None:
        return Crosscheck(pair, None, NOT_MEASURED, missing or "no ratio: fewer than two rounds")
    low, high = ours.low / (1 + band), ours.high * (1 + band)
    if ours.low <= 0 or ours.high / ours.low > (1 + band) ** 2:
        why = (
            f"our interval [{ours.low:.2f}, {ours.high:.2f}] is wider than the band "
            f"({(1 + band) ** 2:.2f}×): more or longer rounds (--rounds, --round-duration), "
            "a quieter host"
        )
        return Crosscheck(pair, ours, INCONCLUSIVE, why)
    if low <= pair.published <= high:
        why = f"{pair.published:g} within [{low:.2f}, {high:.2f}] (ours ± the band {band:.0%})"
        return Crosscheck(pair, ours, AGREES, why)
    side = "above" if pair.published > high else "below"
    why = f"{pair.published:g} {side} [{low:.2f}, {high:.2f}]; what differs: {pair.differs}"
    return Crosscheck(pair, ours, DISAGREES, why)


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
        results.append(judge(pair, ours, published.band, missing))
    return results


def rows(results: Sequence[Crosscheck]) -> list[list[str]]:
    """The table's rows (HEADERS), the same for the console and Markdown."""
    table = []
    for result in results:
        pair, ours = result.pair, result.ours
        measured = (
            f"{ours.value:.2f} [{ours.low:.2f}, {ours.high:.2f}]" if ours is not None else "–"
        )
        table.append(
            [
                pair.label,
                f"{pair.board}, {pair.date}",
                f"{pair.test} (ours: {pair.scenario}, c{figure(pair.concurrency)})",
                measured,
                f"{pair.published:g}",
                f"{result.verdict}: {result.why}",
                pair.url,
            ]
        )
    return table


def markdown(results: Sequence[Crosscheck], band: float, note: str = "") -> str:
    """The crosscheck as a Markdown page: the table and how it was judged."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = [
        "# Crosscheck: our ratios beside the published boards'",
        "",
        f"Agrees: the published ratio inside our 95 % interval widened by {band:.0%} "
        "(harness/crosscheck/published.toml says why the band). " + note,
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows(results)]
    return "\n".join(lines) + "\n"


def summary_line(results: Sequence[Crosscheck]) -> str:
    """`4 agree, 1 disagrees, 1 not measured` (the counts that are not zero)."""
    counts: dict[str, Any] = {}
    for result in results:
        counts[result.verdict] = counts.get(result.verdict, 0) + 1
    return ", ".join(f"{n} {verdict}" for verdict, n in counts.items())


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

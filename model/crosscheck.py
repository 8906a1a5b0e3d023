"""The crosscheck result model, schema `harness.crosscheck/1`: CrosscheckRun → Crosscheck
→ PublishedPair and Ratio, frozen and validated.

`harness crosscheck` judges each ratio a public board published (a PublishedPair, read
from harness/crosscheck/published.toml) against ours, measured by one comparison run per
(scenario, concurrency). The judgement of every pair is kept as one JSON file beside
those runs in the results directory (`crosscheck-<UTC start>.json`), each pair naming
the run its ratio came from, so its pages (Markdown and HTML) can be drawn again from
the file alone.

Format history (bump CROSSCHECK_SCHEMA on any change; a file of another is refused by name):
- harness.crosscheck/1 — first version: start, band, note, and per pair the published
  pair, our ratio (value, low, high, or null), the verdict, why, and the run id.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from model.files import write_text_atomically
from model.scenarios import SCENARIOS

CROSSCHECK_SCHEMA = "harness.crosscheck/1"
AGREES, DISAGREES, NOT_MEASURED = "agrees", "disagrees", "not measured"
INCONCLUSIVE = "inconclusive"
VERDICTS = (AGREES, DISAGREES, INCONCLUSIVE, NOT_MEASURED)


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
        """`numerator / denominator`."""
        return f"{self.numerator} / {self.denominator}"


@dataclass(frozen=True)
class Ratio:
    """Our ratio numerator / denominator and its 95 % interval [low, high]."""

    value: float
    low: float
    high: float

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in (self.value, self.low, self.high)):
            raise ValueError(f"a ratio needs finite numbers, not {self!r}")
        if self.low > self.high:
            raise ValueError(f"ratio interval [{self.low}, {self.high}]: low above high")


@dataclass(frozen=True)
class Crosscheck:
    """One published pair beside ours: our ratio (None: not measured), the verdict, why,
    and the id of the comparison run it came from ("" when none ran)."""

    pair: PublishedPair
    ours: Ratio | None
    verdict: str
    why: str
    run_id: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        if "/" in self.run_id or self.run_id.startswith("."):
            raise ValueError(f"run id {self.run_id!r} is not a directory name")


@dataclass(frozen=True)
class CrosscheckRun:
    """A whole crosscheck: when it started, the agreement band (a fraction), how the
    comparisons were run (`note`) and every pair's judgement."""

    started: str
    band: float
    note: str
    results: tuple[Crosscheck, ...]
    schema: str = CROSSCHECK_SCHEMA

    def __post_init__(self) -> None:
        if self.schema != CROSSCHECK_SCHEMA:
            raise ValueError(f"schema {self.schema!r} is not {CROSSCHECK_SCHEMA}, the one read")
        if not 0 < self.band < 10:
            raise ValueError(f"band must be a positive fraction, not {self.band!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, schema first."""
        data = asdict(self)
        return {"schema": data.pop("schema"), **data}


def crosscheck_from_dict(data: dict[str, Any]) -> CrosscheckRun:
    """A crosscheck from its JSON form; ValueError naming a schema it does not read."""
    schema = data.get("schema")
    if schema != CROSSCHECK_SCHEMA:
        raise ValueError(f"schema {schema!r} is not {CROSSCHECK_SCHEMA}, the one this reads")
    try:
        results = tuple(
            Crosscheck(
                pair=PublishedPair(**entry["pair"]),
                ours=Ratio(**entry["ours"]) if entry.get("ours") is not None else None,
                verdict=entry["verdict"],
                why=entry["why"],
                run_id=entry.get("run_id", ""),
            )
            for entry in data["results"]
        )
        return CrosscheckRun(data["started"], float(data["band"]), data["note"], results)
    except (KeyError, TypeError) as error:
        raise ValueError(f"a crosscheck file missing or mistyping {error}") from None


def write_crosscheck(run: CrosscheckRun, path: Path) -> Path:
    """Write `run` as JSON to `path` (atomically); returns `path`."""
    write_text_atomically(path, json.dumps(run.to_dict(), indent=2) + "\n")
    return path


def read_crosscheck(path: Path) -> CrosscheckRun:
    """The crosscheck in `path`; ValueError for a file this version cannot read."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("not a crosscheck: the file holds no JSON object")
    return crosscheck_from_dict(data)

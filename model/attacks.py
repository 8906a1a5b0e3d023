"""What one hostile HTTP/2 connection cost a server's well-behaved clients, per attack:
`AttackRetention`, computed from an h2-attacks case's rounds (harness.run.attack_figures)
and kept in its summary (`Summary.attack_retention`), which the table and the chart read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AttackRetention:
    """One attack against one server: the goodput its legitimate clients kept (with the
    attack / without, the geometric mean of the paired rounds' ratios and its 95 %
    interval) and their p99 latency with and without (medians over the rounds)."""

    attack: str
    pairs: int  # rounds with the attack, each paired with one without
    goodput_without_per_s: float  # mean good replies/s of the rounds without
    goodput_with_per_s: float
    retained: float | None  # with / without; None: no usable pair
    retained_ci: tuple[float, float] | None  # 95 %; None under two usable pairs
    p99_without_ms: float | None
    p99_with_ms: float | None
    endings: str  # how the attacker's connection ended, each way counted: `goaway ×3`

    def __post_init__(self) -> None:
        if not self.attack:
            raise ValueError("an attack retention needs the attack's name")
        if not isinstance(self.pairs, int) or self.pairs < 0:
            raise ValueError(f"pairs must be a whole number >= 0, not {self.pairs!r}")
        for name in (
            "goodput_without_per_s",
            "goodput_with_per_s",
            "retained",
            "p99_without_ms",
            "p99_with_ms",
        ):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        pair = self.retained_ci
        if pair is not None and (len(pair) != 2 or not pair[0] <= pair[1]):
            raise ValueError(f"retained_ci must be a (low, high) pair, not {pair!r}")

    @property
    def p99_ratio(self) -> float | None:
        """p99 with the attack over p99 without; None without both."""
        if not self.p99_with_ms or not self.p99_without_ms:
            return None
        return self.p99_with_ms / self.p99_without_ms


def retention_from_dict(data: dict[str, Any]) -> AttackRetention:
    """An AttackRetention from its JSON form (its interval a list)."""
    ci = data.get("retained_ci")
    return AttackRetention(**{**data, "retained_ci": tuple(ci) if ci is not None else None})

"""The h2-attacks profile's figures, from a case's rounds alone (pure): which round each
attack's round pairs with, and per attack the goodput the legitimate clients kept
(`AttackRetention`), its interval from harness.stats.paired_ratio_interval."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from harness.stats import Interval, mean_interval, paired_ratio_interval
from model.attacks import AttackRetention
from model.results import Step

NO_ATTACK = "none"  # a round's `figures.attack` when no attacker ran


def round_schedule(attacks: Sequence[str], pairs: int) -> list[tuple[int, str]]:
    """The rounds in order, each (pair index, attack or NO_ATTACK): per pair index, each
    attack's round beside a round without, their order alternating from one pair index to
    the next (none, A, none, B, … then A, none, B, none, …) so a drift over the case
    weighs on both sides alike."""
    schedule = []
    for index in range(pairs):
        for attack in attacks:
            pair = [(index, NO_ATTACK), (index, attack)]
            schedule += pair if index % 2 == 0 else pair[::-1]
    return schedule


def goodput_per_s(step: Step) -> float:
    """A round's good replies per second (its errors not counted)."""
    return step.achieved


def attack_retention(steps: Sequence[Step]) -> tuple[AttackRetention, ...]:
    """Per attack, in the order first met: its rounds paired with the round without
    that ran beside it (the same `figures.round` and the next to it in the schedule), the
    goodput with / without as the geometric mean of the pairs' ratios with its 95 %
    interval, and the p99 with and without (medians). Steps of no attack round (the
    peak's) are ignored; an attack round without its partner is left out."""
    rounds = [s for s in steps if s.figures.attack is not None]
    attacks = list(dict.fromkeys(s.figures.attack for s in rounds if s.figures.attack != NO_ATTACK))
    found = []
    for attack in attacks:
        pairs = _pairs(rounds, attack)
        if not pairs:  # its round without never ran: nothing to weigh it against
            continue
        with_, without = [w for w, _ in pairs], [n for _, n in pairs]
        with_goodput = [goodput_per_s(s) for s in with_]
        without_goodput = [goodput_per_s(s) for s in without]
        retained, interval = retained_ratio(with_goodput, without_goodput)
        endings = Counter(s.figures.attack_ending or "unknown" for s in with_)
        found.append(
            AttackRetention(
                attack=attack,
                pairs=len(pairs),
                goodput_without_per_s=round(_mean(without_goodput), 1),
                goodput_with_per_s=round(_mean(with_goodput), 1),
                retained=None if retained is None else round(retained, 4),
                retained_ci=(
                    None if interval is None else (round(interval.low, 4), round(interval.high, 4))
                ),
                p99_without_ms=_median_p99(without),
                p99_with_ms=_median_p99(with_),
                endings=", ".join(f"{way} ×{n}" for way, n in endings.most_common()),
            )
        )
    return tuple(found)


def _pairs(rounds: Sequence[Step], attack: str) -> list[tuple[Step, Step]]:
    """Each round of `attack` with its round without: adjacent, the same pair index, and
    not already the partner of another attack's round (round_schedule's order)."""
    taken: set[int] = set()
    pairs = []
    for position, step in enumerate(rounds):
        if step.figures.attack == NO_ATTACK or step.figures.attack is None:
            continue
        for near in (position - 1, position + 1):
            if near in taken or not 0 <= near < len(rounds):
                continue
            partner = rounds[near]
            if partner.figures.attack == NO_ATTACK and partner.figures.round == step.figures.round:
                taken.add(near)
                if step.figures.attack == attack:
                    pairs.append((step, partner))
                break
    return pairs


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def retained_ratio(
    with_goodput: Sequence[float], without_goodput: Sequence[float]
) -> tuple[float | None, Interval | None]:
    """Goodput with / without over the pairs, and its 95 % interval (None under two
    pairs): the geometric mean of the ratios (harness.stats.paired_ratio_interval); when
    a round with the attack kept nothing, whose log does not exist, the ratios' plain
    mean and its t interval instead (its low end at 0 at most), so a starved server is
    not judged by its rounds that were served alone. A pair whose round without served
    nothing weighs nothing; None when none is left."""
    pairs = [(w, n) for w, n in zip(with_goodput, without_goodput, strict=True) if n > 0]
    if not pairs:
        return None, None
    ratios = [w / n for w, n in pairs]
    if all(r > 0 for r in ratios):
        interval = paired_ratio_interval([w for w, _ in pairs], [n for _, n in pairs])
        return statistics.geometric_mean(ratios), interval
    interval = mean_interval(ratios)
    if interval is not None:
        interval = Interval(interval.value, max(0.0, interval.low), interval.high)
    return statistics.fmean(ratios), interval


def _median_p99(steps: Sequence[Step]) -> float | None:
    values = [s.latency_ms.get("p99") for s in steps]
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None

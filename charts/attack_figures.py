"""The h2-attacks figures, drawn from the cases alone: per attack, a bar per server of the
goodput its well-behaved clients kept with one attacking connection (with / without, its
95 % interval as an error bar) and of their p99 with and without it (the summaries'
model.attacks.AttackRetention); and per server its closed-loop peak round, the rate the
paced rounds were a fraction of (the case's step that ran no attack round)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from charts.drawing import THOUSANDS, Series, legend, new_axes, titled
from model.results import Step

# p99s further apart than this get a log y axis: a starved server's seconds would
# otherwise flatten every other bar's milliseconds into the bottom of a linear one
P99_LOG_SPREAD = 20.0


def attacks_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """Grouped bars: attacks along x, a bar per server in each group at its retained
    goodput (1.0: the attack cost nothing), error bars its 95 % interval over the pairs;
    None when no case measured an attack."""
    drawn = _attack_axes(
        series,
        titled("Goodput kept under one attacking HTTP/2 connection", context),
        "goodput with / without the attack (error bars: 95 % interval)",
    )
    if drawn is None:
        return None
    measured, attacks, figure, axes = drawn
    width = 0.8 / len(measured)
    for position, one in enumerate(measured):
        kept = {r.attack: r for r in one.case.summary.attack_retention}
        xs, heights, low, high = [], [], [], []
        for index, attack in enumerate(attacks):
            retention = kept.get(attack)
            if retention is None or retention.retained is None:
                continue
            xs.append(index - 0.4 + width * (position + 0.5))
            heights.append(retention.retained)
            ci = retention.retained_ci or (retention.retained, retention.retained)
            low.append(max(retention.retained - ci[0], 0.0))
            high.append(max(ci[1] - retention.retained, 0.0))
        axes.bar(xs, heights, width, color=one.colour, edgecolor="black", label=one.label)
        axes.errorbar(xs, heights, yerr=[low, high], fmt="none", ecolor="black", capsize=3)
    axes.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    _attack_ticks(axes, attacks)
    axes.set_ylim(bottom=0)
    legend(axes, set())
    return figure


def attack_p99_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """Grouped bars: attacks along x, per server a pair of bars, its well-behaved clients'
    p99 in the rounds without the attack (pale, hatched) and with it (solid), each the
    median over the rounds; above each pair the ratio with / without. A log y axis when
    the p99s span more than P99_LOG_SPREAD; None when no case measured an attack."""
    drawn = _attack_axes(
        series,
        titled("p99 latency under one attacking HTTP/2 connection", context),
        "p99 of the well-behaved clients (ms; median over the rounds)",
    )
    if drawn is None:
        return None
    measured, attacks, figure, axes = drawn
    width = 0.8 / (2 * len(measured))
    values = []
    for position, one in enumerate(measured):
        offsets = [index - 0.4 + width * 2 * position for index in range(len(attacks))]
        left_of = dict(zip(attacks, offsets, strict=True))
        # more than three servers: no room above the pairs for their ratios
        values += _p99_pairs(axes, one, left_of, width, ratios=len(measured) <= 3)
    positive = [v for v in values if v > 0]
    if positive and max(positive) / min(positive) > P99_LOG_SPREAD:
        axes.set_yscale("log")
        axes.set_ylabel(axes.get_ylabel().removesuffix(")") + "; log scale)")
    else:
        axes.set_ylim(0, (max(values, default=0.0) or 1.0) * 1.15)
    _attack_ticks(axes, attacks)
    handles = [Patch(facecolor=one.colour, edgecolor="black", label=one.label) for one in measured]
    handles += [
        Patch(facecolor="white", edgecolor="black", hatch="//", label="hatched: without"),
        Patch(facecolor="grey", edgecolor="black", label="solid: with the attack"),
    ]
    legend(axes, set(), (handles, [str(h.get_label()) for h in handles]))
    return figure


def _attack_axes(
    series: Sequence[Series], title: str, ylabel: str
) -> tuple[list[Series], list[str], Figure, Axes] | None:
    """The servers that measured an attack, the attacks, and a figure with attacks along
    its x axis; None when no case measured one."""
    measured = [one for one in series if one.case.summary.attack_retention]
    if not measured:
        return None
    figure, axes = new_axes(title, "attack", ylabel, categorical=True)
    return measured, _attacks(measured), figure, axes


def _p99_pairs(
    axes: Axes, one: Series, left_of: dict[str, float], width: float, ratios: bool
) -> list[float]:
    """One server's pair of p99 bars per attack it measured, the pair's left edge at
    `left_of[attack]`: without (pale, hatched), with (solid); "no reply" where rounds
    kept none; above each pair the ratio with / without when `ratios`. Returns the p99s
    drawn."""
    drawn = []
    for retention in one.case.summary.attack_retention:
        left = left_of[retention.attack]
        pair = ((retention.p99_without_ms, "without"), (retention.p99_with_ms, "with"))
        for offset, (p99, side) in enumerate(pair):
            middle = left + width * (offset + 0.5)
            if p99 is None:  # no reply in those rounds: no p99 to draw
                axes.annotate(
                    "no reply",
                    (middle, 0.01),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    ha="center",
                    va="bottom",
                    rotation=90,
                )
                continue
            drawn.append(p99)
            axes.bar(
                middle,
                p99,
                width,
                color=one.colour,
                alpha=1.0 if side == "with" else 0.35,
                hatch="" if side == "with" else "//",
                edgecolor="black",
                gid=f"p99:{one.label}:{retention.attack}:{side}",
            )
        if ratios and retention.p99_ratio is not None:
            top = max(retention.p99_with_ms or 0.0, retention.p99_without_ms or 0.0)
            axes.annotate(
                f"{retention.p99_ratio:.2g}×",
                (left + width, top),
                xytext=(0, 3),
                textcoords="offset points",
                fontsize=7,
                ha="center",
                va="bottom",
            )
    return drawn


def attack_peak_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """A bar per server of its closed-loop peak round (replies/s, its errors said above
    it) and, above it, the rate its paced rounds ran at; None when no case ran one (the
    profile fixed the rate)."""
    drawn = [(one, peak) for one in series if (peak := peak_round(one.case.steps)) is not None]
    if not drawn:
        return None
    in_flight = sorted({f"{peak.offered:,.0f}" for _, peak in drawn})
    figure, axes = new_axes(
        titled("Closed-loop peak round, the paced rounds' reference", context),
        "server (above each bar: the rate its rounds were paced at)",
        f"replies/s, {' / '.join(in_flight)} requests in flight",
        categorical=True,
    )
    labels = [one.label for one, _ in drawn]
    heights = [peak.achieved for _, peak in drawn]
    colours = [one.colour for one, _ in drawn]
    bars = axes.bar(labels, heights, color=colours, edgecolor="black", gid="attack-peaks")
    for bar, (one, peak) in zip(bars, drawn, strict=True):
        paced = paced_rate(one.case.steps)
        text = f"{peak.achieved:,.0f}"
        if peak.errors["total"]:
            text += f", {peak.errors['total']:,} errors"
        text += f"\npaced at {paced:,.0f} req/s" if paced is not None else "\nno paced round"
        top = (bar.get_x() + bar.get_width() / 2, bar.get_height())
        axes.annotate(
            text, top, xytext=(0, 3), textcoords="offset points", ha="center", va="bottom"
        )
    axes.set_ylim(0, (max(heights) or 1.0) * 1.25)
    axes.yaxis.set_major_formatter(THOUSANDS)
    return figure


def peak_round(steps: Sequence[Step]) -> Step | None:
    """An h2-attacks case's closed-loop peak round: its step that is no attack round (the
    rounds without an attack name `none`); None when the profile fixed the rate."""
    return next((s for s in steps if s.figures.attack is None), None)


def paced_rate(steps: Sequence[Step]) -> float | None:
    """The offered rate (req/s) of an h2-attacks case's paced rounds; None without one."""
    return next((s.offered for s in steps if s.figures.attack is not None), None)


def _attacks(measured: Sequence[Series]) -> list[str]:
    """Every attack any case measured, in the order first met."""
    return list(
        dict.fromkeys(r.attack for one in measured for r in one.case.summary.attack_retention)
    )


def _attack_ticks(axes: Axes, attacks: Sequence[str]) -> None:
    """One tick per attack, named without its `h2-`, slanted past four."""
    axes.set_xticks(range(len(attacks)), [a.removeprefix("h2-") for a in attacks])
    if len(attacks) > 4:
        axes.tick_params(axis="x", labelrotation=20)

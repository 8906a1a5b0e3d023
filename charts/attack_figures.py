"""The h2-attacks figure: per attack, a bar per server of the goodput its well-behaved
clients kept with one attacking connection (with / without), its 95 % interval as an
error bar; drawn from the cases' summaries (model.attacks.AttackRetention) alone."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from charts.drawing import Series, legend, new_axes, titled


def attacks_figure(series: Sequence[Series], context: str = "") -> Figure | None:
    """Grouped bars: attacks along x, a bar per server in each group at its retained
    goodput (1.0: the attack cost nothing), error bars its 95 % interval over the pairs;
    None when no case measured an attack."""
    measured = [one for one in series if one.case.summary.attack_retention]
    if not measured:
        return None
    attacks = list(
        dict.fromkeys(r.attack for one in measured for r in one.case.summary.attack_retention)
    )
    figure, axes = new_axes(
        titled("Goodput kept under one attacking HTTP/2 connection", context),
        "attack",
        "goodput with / without the attack (error bars: 95 % interval)",
        categorical=True,
    )
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
    axes.set_xticks(range(len(attacks)), [a.removeprefix("h2-") for a in attacks])
    if len(attacks) > 4:
        axes.tick_params(axis="x", labelrotation=20)
    axes.set_ylim(bottom=0)
    legend(axes, set())
    return figure

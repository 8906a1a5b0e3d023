"""`harness compare --profile h2-attacks` end to end on twisted over h2c: the case runs a
peak round, then each attack's rounds beside rounds without, and the report has the
table of what one attacking connection cost the well-behaved clients."""

from __future__ import annotations

from html import escape
from pathlib import Path

from charts.attack_tables import ATTACKS, attack_rows
from harness.run.attack_figures import NO_ATTACK
from model.results import read_run
from tests.helpers import harness, require_framework, require_tools

SHORT = (
    "ramp.attacks=h2-ping-flood,h2-rapid-reset",
    "ramp.pairs=2",
    "ramp.round_s=2",
    "ramp.peak_s=1",
    "warmup_s=0",
    "cooldown_s=0",
)


def test_twisted_under_two_attacks_keeps_its_goodput_with_an_interval(tmp_path: Path) -> None:
    require_tools("h2load")
    require_framework("twisted")
    settings = [arg for setting in SHORT for arg in ("--set", setting)]
    result = harness(
        "compare",
        "--frameworks",
        "twisted",
        "--profile",
        "h2-attacks",
        *settings,
        "--out",
        str(tmp_path),
        timeout_s=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    [case] = read_run(run_dir).cases
    assert case.status == "ok", case.error
    assert case.protocol == "h2c"
    peak, *rounds = case.steps
    assert peak.figures.attack is None and peak.unit == "concurrency"
    [rate_from] = {s.figures.rate_from for s in rounds}
    assert rate_from is not None and rate_from.startswith("50 % of the closed-loop peak")
    for attack in ("h2-ping-flood", "h2-rapid-reset"):
        attacked = [s for s in rounds if s.figures.attack == attack]
        assert len(attacked) == 2
        # what the attacker saw: twisted ends both floods (servers.core.h2_budget)
        assert all(s.figures.attack_units_sent for s in attacked)
        assert {s.figures.attack_ending for s in attacked} <= {"goaway", "closed", "reset"}
    assert len([s for s in rounds if s.figures.attack == NO_ATTACK]) == 4
    retention = {r.attack: r for r in case.summary.attack_retention}
    assert set(retention) == {"h2-ping-flood", "h2-rapid-reset"}
    for kept in retention.values():
        assert kept.pairs == 2 and kept.retained is not None
        assert kept.retained_ci is not None
        assert kept.retained_ci[0] <= kept.retained <= kept.retained_ci[1]
    report = (run_dir / "report.html").read_text()
    assert "<h3>HTTP/2 attacks</h3>" in report
    assert all(
        f"<th>{escape(h)}</th>" in report
        for h in ATTACKS.render(attack_rows(read_run(run_dir).cases), "bracketed").headers
    )
    # the paced rounds are no ramp: no chart draws them against a load
    charts = {png.stem for png in (run_dir / "charts").glob("*.png")}
    assert charts == {"attacks", "attack_p99", "attack_peak"}
    assert "h2 attacks" in result.stdout

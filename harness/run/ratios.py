"""Each case against another of the same run: its ratio to nginx's peak and CPU cost
(`with_baseline_ratios`), and an h1-tls case's TLS tax against its h1 case
(`with_tls_tax`). Paired round by round where both ran confirmation rounds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from harness.run.round_figures import round_ratio, rounded_pair
from model.results import Case
from servers.contract import PROTOCOL_H1, PROTOCOL_H1_TLS


def with_baseline_ratios(cases: Sequence[Case], roles: Mapping[str, str]) -> list[Case]:
    """Each case's role (from `roles`, framework by default), and its peak as a ratio to
    nginx's peak in the same run (the affinity study: on noisy machines the ratio to a
    baseline measured alongside is the figure that travels).

    nginx is matched on scenario, sink, driver, affinity mode, protocol and process model,
    falling back to nginx's case with the same scenario, mode and protocol under any
    process model (never across protocols: that ratio would hold the TLS tax). With
    rounds on both sides the ratio is taken round by round, with its interval.
    """
    nginx = [c for c in cases if c.framework == "nginx" and c.status == "ok"]

    def nginx_case(case: Case) -> Case | None:
        same = [
            c
            for c in nginx
            if (c.scenario, c.sink, c.driver, c.affinity.get("mode"), c.protocol)
            == (case.scenario, case.sink, case.driver, case.affinity.get("mode"), case.protocol)
        ]
        exact = [c for c in same if c.process_model == case.process_model]
        return (exact or same or [None])[0]

    result = []
    for case in cases:
        summary = dataclasses.replace(case.summary, role=roles.get(case.framework, "framework"))
        peak, baseline = summary.peak, nginx_case(case)
        if peak is not None and baseline and baseline.summary.peak and summary.peak_unit == "req/s":
            paired = round_ratio(case, baseline)
            summary = dataclasses.replace(
                summary,
                ratio_to_nginx=round(
                    paired.value if paired else float(peak) / float(baseline.summary.peak), 3
                ),
                ratio_to_nginx_ci=rounded_pair(paired, 3),
            )
        cost, baseline_cost = (
            summary.cpu_us_per_req,
            (baseline.summary.cpu_us_per_req if baseline else None),
        )
        if cost is not None and baseline_cost:
            summary = dataclasses.replace(
                summary, cpu_ratio_to_nginx=round(cost / baseline_cost, 3)
            )
        result.append(dataclasses.replace(case, summary=summary))
    return result


def with_tls_tax(cases: Sequence[Case]) -> list[Case]:
    """Each h1-tls case's `tls_tax`: its peak as a ratio to the same server's h1 peak in
    the same run (the same scenario, sink, driver, process model and affinity mode), with
    its 95 % interval when both ran confirmation rounds (paired round by round, as the
    ratio to nginx is). Below 1.0: what TLS costs that server. Other cases unchanged."""
    plain = {
        (c.identity[:-1]): c
        for c in cases
        if c.protocol == PROTOCOL_H1 and c.status == "ok" and c.summary.peak
    }
    result = []
    for case in cases:
        h1 = plain.get(case.identity[:-1]) if case.protocol == PROTOCOL_H1_TLS else None
        peak = case.summary.peak
        if h1 is None or case.status != "ok" or peak is None or h1.summary.peak is None:
            result.append(case)
            continue
        paired = round_ratio(case, h1)
        tax = paired.value if paired else float(peak) / float(h1.summary.peak)
        summary = dataclasses.replace(
            case.summary, tls_tax=round(tax, 3), tls_tax_ci=rounded_pair(paired, 3)
        )
        result.append(dataclasses.replace(case, summary=summary))
    return result

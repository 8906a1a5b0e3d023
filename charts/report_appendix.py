"""report.html's sections of how one run was made, after the figures: the load hosts of a
fleet run, the deviations and checks of verify, the records reconciled against the sink,
then the host, the versions and the profile as run.

Each section is a list of the page's parts (report.render_html joins them with newlines),
empty when the run has nothing for it.
"""

from __future__ import annotations

import json
from html import escape

from charts.page import number, table
from charts.report_rows import HOST_HEADERS, deviation_rows, host_rows, verify_rows
from model.results import Run

# the reconcile fields the report shows (docs/results.md); old runs lack the last two
REPORTED_RECONCILE = ("sent", "stored", "lost", "duplicates", "unparseable")


def appendix_sections(run: Run) -> list[str]:
    """Every section of how the run was made, in the page's order."""
    return [
        *load_hosts_section(run),
        *deviations_section(run),
        *verify_section(run),
        *reconcile_section(run),
        *host_section(run),
    ]


def load_hosts_section(run: Run) -> list[str]:
    """A fleet run's figures per load host and step, then the merged ones."""
    rows = [row for case in run.cases for row in host_rows(case)]
    if not rows:
        return []
    fleet = run.config.get("fleet", {})
    return [
        f"<h2>Load hosts — {escape(run.run_id)}</h2>",
        f"<p>The load came from {len(fleet.get('hosts', []))} hosts of the fleet "
        f"{escape(str(fleet.get('spec', '')))}; servers listened on "
        f"{escape(str(fleet.get('server_address', '')))}. Each step: every host's own "
        "figures, then the merged ones (counts summed exactly; a merged percentile is "
        "not the hosts' mean: ≤ marks its upper bound, the largest host's).</p>",
        table(HOST_HEADERS, rows, numeric=set(range(3, 12))),
    ]


def deviations_section(run: Run) -> list[str]:
    """The robustness rules a server bent while answering rightly (verify's record)."""
    deviations = deviation_rows(run)
    if not deviations:
        return []
    return [
        f"<h2>Deviations — {escape(run.run_id)}</h2>",
        "<p>Robustness rules a server bent while answering what it is measured on "
        "rightly: it was measured. A <b>warning</b> is one the server does not "
        "declare (<code>--strict-verify</code> fails it); a declared one gives the "
        "server's reason.</p>",
        table(
            ["framework", "check", "key", "sent", "expected", "came", "status"],
            deviations,
            set(),
        ),
    ]


def verify_section(run: Run) -> list[str]:
    """Each of verify's checks on each case."""
    rows = [row for case in run.cases for row in verify_rows(case)]
    if not rows:
        return []
    return [
        f"<h2>Verify — {escape(run.run_id)}</h2>",
        table(["framework", "check", "result", "detail"], rows, set()),
    ]


def reconcile_section(run: Run) -> list[str]:
    """Each sink case's records sent against those stored: nothing lost."""
    reconciled = [c for c in run.cases if c.reconcile]
    if not reconciled:
        return []
    rows = [
        [
            escape(c.framework),
            escape(c.sink),
            *(number((c.reconcile or {}).get(k)) for k in REPORTED_RECONCILE),
        ]
        for c in reconciled
    ]
    return [
        f"<h2>Nothing lost — {escape(run.run_id)}</h2>",
        table(
            ["framework", "sink", "sent", "stored", "lost", "duplicates", "unparseable"],
            rows,
            numeric={2, 3, 4, 5, 6},
        ),
    ]


def host_section(run: Run) -> list[str]:
    """The host's facts, the versions of everything measured, and the profile as run."""
    facts = [[escape(k), escape(str(v))] for k, v in run.host.items()]
    return [
        f"<h2>Host and versions — {escape(run.run_id)}</h2>",
        table(["fact", "value"], facts, set()),
        f"<pre>{escape(json.dumps(run.versions, indent=2))}</pre>",
        "<h3>Configuration</h3>",
        f"<pre>{escape(json.dumps(run.config.get('profile', {}), indent=2))}</pre>",
    ]

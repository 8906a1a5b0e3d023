"""Tables the report shares with the text outputs (harness.outputs): one place, so the
report, the Markdown output and compare's console agree. No harness here (charts draw the
model only)."""

from __future__ import annotations

from model.figures import figure
from model.results import Case

MEMORY_HEADERS = (
    "server",
    "held",
    "breaking point",
    "server KB/conn",
    "agents KB/conn",
    "kernel KB/conn",
    "host KB/conn",
    "host GiB left",
)


def memory_rows(cases: list[Case]) -> list[list[str]]:
    """The connection table's rows (MEMORY_HEADERS): each connection case's connections at
    its top held step, where it broke (and the limit, when one stopped it), and where the
    memory went per connection (`summary.memory_breakdown`: the server's cgroup, or its
    RSS without one; the agents; the kernel's slab, both ends; the whole host) with what
    the host had left. Empty when no case has a breakdown or a breaking point."""
    rows = []
    for case in cases:
        summary = case.summary
        breakdown, breaking = summary.memory_breakdown, summary.breaking_point
        if breakdown is None and breaking is None:
            continue
        breakdown = breakdown or {}
        per = breakdown.get("kb_per_connection") or {}
        server_kb = per.get("server_cgroup")
        left = breakdown.get("host_available_bytes")
        rows.append(
            [
                case.framework + (" (baseline)" if summary.role == "baseline" else ""),
                figure(breakdown.get("connections")),
                "–"
                if breaking is None
                else f"{breaking['connections']:,}: {breaking.get('limit') or breaking['reason']}",
                figure(server_kb if server_kb is not None else per.get("server_rss")),
                figure(per.get("agents_rss")),
                figure(per.get("kernel_slab")),
                figure(per.get("host")),
                figure(left / 2**30 if left is not None else None),
            ]
        )
    return rows


def pinning_text(affinity: str, server_cpus: object, load_cpus: object) -> str:
    """Where a run pinned its server and its load (`--affinity`), in one phrase: "server
    CPUs 0, load CPUs 1" when both were pinned; "no CPU pinning (affinity none)" rather than
    CPU lists the run never applied."""
    if affinity == "none":
        return "no CPU pinning (affinity none)"
    if affinity == "server":
        return f"server CPUs {server_cpus}, load unpinned (affinity server)"
    if affinity == "agent":
        return f"server unpinned, load CPUs {load_cpus} (affinity agent)"
    if affinity == "matrix":
        return f"affinity matrix: server CPUs {server_cpus}, load CPUs {load_cpus} where pinned"
    return f"server CPUs {server_cpus}, load CPUs {load_cpus}"

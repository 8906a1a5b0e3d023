"""The CPU readings of one step's window: the CPUs a side may use, the load generators'
CPU time and share, and the noise other processes made on the server's and the load's
CPUs.
"""

from __future__ import annotations

from typing import Any

from harness import affinity as cpu_affinity
from harness.monitor import StepWindow
from harness.run.bottleneck import reaped_cpu_s, step_noise


def cpus_of(cpu_list: str | None) -> frozenset[int]:
    """The CPUs a `taskset -c` list names; None (unpinned): every CPU a child may use."""
    if cpu_list is None:
        return cpu_affinity.unpinned_cpus()
    return frozenset(cpu_affinity.parse_cpu_list(cpu_list))


def load_cpu_pct(
    cpu_s: float | None, window: StepWindow, sampled_pct: float | None
) -> float | None:
    """`cpu_s` as % of one core over the step's window, exact as the server's CPU is; the
    mean of the 1 s samples (`sampled_pct`) only where no CPU time was read. The samples'
    mean read h2load at 71-74 % of its core in rounds where its cgroup counted 97-100 %
    (their first sample straddles the gap before the step), so no step was driver_bound."""
    if cpu_s is None or window.ended is None or window.ended <= window.started:
        return sampled_pct
    return round(100.0 * cpu_s / (window.ended - window.started), 1)


def load_cpu_s(window: StepWindow) -> tuple[float | None, str | None]:
    """The CPU seconds a local step's load generators used, and where that was read: their
    cgroup's counter over the window (`cgroup`: every process they ran, whatever became of
    it), else the children the harness reaped in it (`reaped`: they end and are reaped
    inside the window, their own children included once reaped by them)."""
    before, after = window.load_cgroup_before, window.load_cgroup_after
    if before is not None and after is not None:
        return max(0.0, after.cpu_s - before.cpu_s), "cgroup"
    reaped = reaped_cpu_s(window.cpu_before, window.cpu_after)
    return reaped, "reaped" if reaped is not None else None


def step_noise_of(
    window: StepWindow, server_cpus: frozenset[int], load_cpus: frozenset[int]
) -> dict[str, Any] | None:
    """`other_cpu_pct` and `harness_cpu_pct` of a step window (None without its clocks)."""
    if window.cpu_before is None or window.cpu_after is None:
        return None
    return step_noise(
        window.cpu_before,
        window.cpu_after,
        server_cpus=server_cpus,
        load_cpus=load_cpus,
        reaped_cpus=load_cpus,  # the children reaped in a step are its load generators
        outside_tree_s=outside_tree_s(window),
    )


def outside_tree_s(window: StepWindow) -> float:
    """CPU seconds the server's cgroup counted in the window beyond its process tree's
    clocks (0 without a cgroup)."""
    before, after = window.server_cgroup_before, window.server_cgroup_after
    tree_before, tree_after = window.server_cpu_s_before, window.server_cpu_s_after
    if before is None or after is None or tree_before is None or tree_after is None:
        return 0.0
    tree_s = sum(max(0.0, cpu_s - tree_before.get(pid, 0.0)) for pid, cpu_s in tree_after.items())
    return max(0.0, after.cpu_s - before.cpu_s - tree_s)

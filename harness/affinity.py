"""CPU lists for `taskset -c`: parsing, checking against this machine, reading them back."""

from __future__ import annotations

import os
from pathlib import Path

from model.errors import UserError


def parse_cpu_list(spec: str) -> list[int]:
    """`0`, `1-3`, `0,2-3` → sorted CPU numbers; a CPU this machine lacks is a UserError."""
    cpus: set[int] = set()
    try:
        for part in spec.split(","):
            first, _, last = part.strip().partition("-")
            low, high = int(first), int(last or first)
            if low > high:
                raise ValueError
            cpus.update(range(low, high + 1))
    except ValueError:
        raise UserError(f"CPU list {spec!r} is not like 0 or 1-3 or 0,2-3") from None
    allowed = os.sched_getaffinity(0)
    absent = sorted(cpus - allowed)
    if absent:
        raise UserError(
            f"CPU {','.join(map(str, absent))} is not available here "
            f"(this machine offers {format_cpu_list(sorted(allowed))})"
        )
    return sorted(cpus)


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] → '0-2,5' (the form taskset and /proc use)."""
    ranges: list[str] = []
    for cpu in sorted(cpus):
        if ranges and cpu == int(ranges[-1].split("-")[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def cpus_allowed(pid: int) -> str | None:
    """The Cpus_allowed_list the kernel holds for `pid` (what taskset really did)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None

"""Choosing frameworks by name: `all`, or a comma-separated list checked against the registry."""

from __future__ import annotations

from harness.errors import UserError
from servers import FRAMEWORKS


def select_frameworks(spec: str) -> list[str]:
    """`all` (every framework installed here) or `a,b`; an unknown name lists the valid ones."""
    if spec.strip() == "all":
        available = [name for name, f in FRAMEWORKS.items() if f.available()]
        if not available:
            raise UserError("no framework is installed: pip install 'serverbench-harness[all]'")
        return available
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown or not names:
        raise UserError(
            f"unknown framework {', '.join(unknown) or repr(spec)}: "
            f"choose from all, {', '.join(FRAMEWORKS)}"
        )
    missing = [
        f"{n} (pip install {' '.join(FRAMEWORKS[n].missing())})"
        for n in names
        if not FRAMEWORKS[n].available()
    ]
    if missing:
        raise UserError(f"not installed: {', '.join(missing)}")
    return names

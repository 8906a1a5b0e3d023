"""Choosing frameworks by name: `all`, or a comma-separated list checked against the registry."""

from __future__ import annotations

from model.errors import UserError
from servers import FRAMEWORKS


def select_frameworks(spec: str) -> list[str]:
    """`all` (every framework and baseline installed here), `baselines` (nginx, Node.js,
    EventMachine), or `a,b` (which may include `baselines`); an unknown name lists the
    valid ones."""
    if spec.strip() in ("all", "baselines"):
        wanted = ("framework", "baseline") if spec.strip() == "all" else ("baseline",)
        available = [name for name, f in FRAMEWORKS.items() if f.available() and f.role in wanted]
        if not available:
            raise UserError(f"nothing of {spec.strip()} is installed: harness doctor --install")
        return available
    names: list[str] = []
    for name in (part.strip() for part in spec.split(",")):
        if name == "baselines":
            names += [n for n, f in FRAMEWORKS.items() if f.role == "baseline" and f.available()]
        elif name:
            names.append(name)
    unknown = [name for name in names if name not in FRAMEWORKS]
    if unknown or not names:
        raise UserError(
            f"unknown framework {', '.join(unknown) or repr(spec)}: "
            f"choose from all, baselines, {', '.join(FRAMEWORKS)}"
        )
    missing = [
        f"{n} (missing {', '.join(FRAMEWORKS[n].missing())})"
        for n in names
        if not FRAMEWORKS[n].available()
    ]
    if missing:
        raise UserError(f"not installed: {', '.join(missing)}")
    return names

"""Figures measured once on one host that the harness plans with, kept as data with their
provenance in harness/data/measured.toml: each its value and unit, the host, the date,
the command that measured it, the runs and the figure it was read from.

`measured_value("agent_kb_per_connection", "KiB/connection")` is one value, its unit
checked; `measurements_under("server_memory.")` is a family of them by the rest of their
names. A file of another version, a field unknown or missing, a host not described, or a
unit other than the one asked for is a ValueError naming it.
"""

from __future__ import annotations

import datetime
import functools
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

MEASURED_PATH = Path(__file__).resolve().parent / "data" / "measured.toml"
MEASURED_VERSION = 1  # measured.toml's `version`: a file of another is refused by name
RUN_ID = re.compile(r"^\d{8}-\d{6}\.\d{3}-[\w.-]+$")  # harness.run.plan's run ids


@dataclass(frozen=True)
class MeasuredHost:
    """The host a figure was measured on."""

    name: str
    what: str
    cpus: int
    memory_gib: float
    open_files: int

    def __post_init__(self) -> None:
        if self.cpus < 1 or self.memory_gib <= 0 or self.open_files < 1:
            raise ValueError(f"host {self.name!r}: cpus, memory and open files must be > 0")


@dataclass(frozen=True)
class Measurement:
    """One figure as measured: `value` in `unit` on `host`, on `date`, by `command`, read
    from `runs` as `figure` says, at the point `at` (connections, workers, ...)."""

    name: str
    value: float
    unit: str
    host: MeasuredHost
    date: datetime.date
    command: str
    figure: str
    runs: tuple[str, ...] = ()
    at: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            raise ValueError(f"{self.name}: value must be a number, not {self.value!r}")
        for name in ("unit", "command", "figure"):
            if not getattr(self, name).strip():
                raise ValueError(f"{self.name}: {name} must say something")
        bad_runs = [run for run in self.runs if not RUN_ID.match(run)]
        if bad_runs:
            raise ValueError(f"{self.name}: {bad_runs} are not run ids")
        bad_at = {k: v for k, v in self.at.items() if not isinstance(v, int | float)}
        if bad_at:
            raise ValueError(f"{self.name}: `at` must hold numbers, not {bad_at!r}")


def _host(name: str, entry: dict[str, Any], path: Path) -> MeasuredHost:
    known = {f.name for f in fields(MeasuredHost)} - {"name"}
    if set(entry) != known:
        raise ValueError(
            f"{path}: host {name!r} needs exactly {sorted(known)}, has {sorted(entry)}"
        )
    return MeasuredHost(name=name, **entry)


def _measurement(entry: dict[str, Any], hosts: dict[str, MeasuredHost], path: Path) -> Measurement:
    known = {f.name for f in fields(Measurement)}
    unknown = sorted(set(entry) - known)
    missing = sorted({"name", "value", "unit", "host", "date", "command", "figure"} - set(entry))
    if unknown or missing:
        raise ValueError(f"{path}: {entry.get('name')!r}: unknown {unknown}, missing {missing}")
    if entry["host"] not in hosts:
        raise ValueError(f"{path}: {entry['name']}: host {entry['host']!r} is not described")
    if not isinstance(entry["date"], datetime.date):
        raise ValueError(f"{path}: {entry['name']}: date {entry['date']!r} is not a date")
    return Measurement(
        **{**entry, "host": hosts[entry["host"]], "runs": tuple(entry.get("runs", ()))}
    )


def load_measured(path: Path = MEASURED_PATH) -> dict[str, Measurement]:
    """Every figure of `path` by name, in the file's order; ValueError naming what is wrong."""
    data = tomllib.loads(path.read_text())
    if data.get("version") != MEASURED_VERSION:
        raise ValueError(
            f"{path}: version {data.get('version')!r} is not {MEASURED_VERSION}, the one read"
        )
    hosts = {name: _host(name, entry, path) for name, entry in data.get("hosts", {}).items()}
    table: dict[str, Measurement] = {}
    for entry in data.get("measured", []):
        found = _measurement(entry, hosts, path)
        if found.name in table:
            raise ValueError(f"{path}: {found.name} is measured twice")
        table[found.name] = found
    return table


@functools.cache
def measured() -> dict[str, Measurement]:
    """The shipped figures (MEASURED_PATH), read once."""
    return load_measured()


def measurement(name: str, unit: str) -> Measurement:
    """The shipped figure `name`, which must be in `unit`."""
    table = measured()
    if name not in table:
        raise ValueError(f"no measured figure {name!r} in {MEASURED_PATH}")
    found = table[name]
    if found.unit != unit:
        raise ValueError(f"{name} is measured in {found.unit}, not {unit}")
    return found


def measured_value(name: str, unit: str) -> float:
    """The value of the shipped figure `name`, which must be in `unit`."""
    return float(measurement(name, unit).value)


def measurements_under(prefix: str, unit: str) -> dict[str, Measurement]:
    """The shipped figures named `prefix` + something, by that something, in the file's
    order; each must be in `unit`."""
    return {
        name.removeprefix(prefix): measurement(name, unit)
        for name in measured()
        if name.startswith(prefix)
    }

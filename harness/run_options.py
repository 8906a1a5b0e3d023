"""RunOptions: everything a comparison is asked for (`harness compare`, `harness run`), as
one typed, frozen value that harness.compare.build_plan turns into a plan.

Precedence, lowest first (as k6 writes its own down):

1. built-in defaults: harness.profile.Profile's field defaults, and this class's own;
2. the profile: `--profile NAME` (harness/profiles/NAME.toml, or a file of one's own);
3. `--set key=value`: any key of `harness.profile.setting_keys()`, `ramp.stop` and the
   like for its ramps; an unknown key is a UsageError (exit status 2) listing the keys;
4. named options: `--sink file`, `--repeat 3`, `--duration 2` ...

A named option left unset is None here, and never overrides a `--set` (nor the profile):
`--set sink=file` alone measures the file sink. `--threshold` rules are added to the
profile's and to a `--set thresholds=RULE`, not put in their place.

The fields below the profile's are the run's own: which frameworks, where servers and load
run, where results go, the database, the fleet, the TLS certificate, the pod limits, the
CI outputs. `harness bench` shares frameworks, loop, server_cpus, load_cpus, protocol,
servers, servers_file, tls_cert, tls_key, fleet, server_address and fleet_access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from harness.live.address import parse_listen
from harness.profile import DEFAULT_PROFILE, check_setting_keys
from model.errors import UserError
from model.thresholds import parse_threshold
from servers import FRAMEWORKS

if TYPE_CHECKING:
    from harness.fleet.client import FleetAccess

DEFAULT_RESULTS_DIR = Path("results")

# the profile's fields (and --set's aliases) a named option of the same name sets
PROFILE_OPTIONS = (
    "scenario",
    "sink",
    "driver",
    "repeat",
    "duration_s",
    "affinity",
    "process_model",
    "protocol",
    "loop",
    "mongo_w",
    "mongo_batch",
    "durable",
    "connections",
    "mode",
    "precision_pct",
    "max_time_s",
    "thresholds",
)


def merge_overrides(settings: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """What overrides the profile: `--set`'s `settings`, then the named `options` over
    them. An option left unset (None) keeps the `--set` value (or, without one, the
    profile's); `thresholds` (rules) are added to a `--set thresholds=` rule."""
    merged = dict(settings)
    for key, value in options.items():
        if key == "thresholds" and value:
            value = [*_rules(merged.pop(key, None)), *value]
        elif key == "thresholds" or value is None:
            continue
        # moved to the end: load_profile applies keys in order, and `--duration` must
        # come after a `--set ramp.duration_s` it overrides, as after `--set duration_s`
        merged.pop(key, None)
        merged[key] = value
    return merged


def _rules(value: Any) -> list[str]:
    """A `thresholds` setting as a list of rules (one rule's text, or several)."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


@dataclass(frozen=True)
class RunOptions:
    """A comparison's options, before anything is checked against this machine (that is
    build_plan's work); `settings` holds `--set`'s keys and values as given."""

    frameworks: str = "all"  # all, baselines, or a comma list (harness.frameworks)
    profile: str = DEFAULT_PROFILE  # a shipped profile's name, or a profile file
    settings: Mapping[str, Any] = field(default_factory=dict)  # --set key=value
    # the named options of the profile's fields (None: not given)
    scenario: str | None = None
    sink: str | None = None
    driver: str | None = None
    repeat: int | None = None
    duration_s: float | None = None  # each step's length, whatever the ramp calls it
    affinity: str | None = None
    process_model: str | None = None
    protocol: str | None = None
    loop: str | None = None
    mongo_w: int | None = None
    mongo_batch: int | None = None
    durable: bool | None = None
    connections: int | None = None  # the connection ramp's target
    mode: str | None = None  # the connection ramp's: load or stress
    precision_pct: float | None = None
    max_time_s: float | None = None
    thresholds: tuple[str, ...] = ()  # added to the profile's rules
    # the run's own
    server_cpus: str | None = None  # None: the first CPU (harness.run.default_cpus)
    load_cpus: str | None = None  # None: the other CPUs
    results_dir: Path = DEFAULT_RESULTS_DIR  # the results root: a run's folder goes in it
    verify: bool = True
    strict_verify: bool = False
    mongo_url: str | None = None  # a real MongoDB (None: FerretDB, started here)
    mongo_backend: str | None = None  # FerretDB's: postgresql or sqlite (None: the default)
    db_cpus: str | None = None  # FerretDB's and PostgreSQL's CPUs (None: not pinned)
    servers: tuple[str, ...] = ()  # --server NAME=COMMAND
    servers_file: Path | None = None  # --servers FILE
    fleet: str | None = None  # local:N or tls://SCHEDULER:PORT (None: load from here)
    server_address: str | None = None
    fleet_access: FleetAccess | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    cpu_quota: float | None = None  # cores
    memory_max: str | None = None  # 512M, 1G
    junit: Path | None = None
    markdown: Path | None = None
    # --live / --prometheus: [HOST:]PORT of the live page / the metrics (None: not served)
    live_address: str | None = None
    prometheus_address: str | None = None
    cpu_profile: bool = False  # one more round at each peak, the server's CPU sampled

    def __post_init__(self) -> None:
        check_setting_keys(self.settings)
        for address, option in (
            (self.live_address, "--live"),
            (self.prometheus_address, "--prometheus"),
        ):
            if address is not None:  # a mistake said before anything starts
                parse_listen(address, option)
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        for name in ("thresholds", "servers"):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, tuple | list):
                raise ValueError(f"{name} must be a tuple of strings, not {value!r}")
            object.__setattr__(self, name, tuple(value))
        for rule in self.thresholds:  # named as the user wrote it, before anything starts
            try:
                parse_threshold(rule, FRAMEWORKS)
            except ValueError as error:
                raise UserError(f"--threshold: {error}") from None

    def profile_overrides(self) -> dict[str, Any]:
        """What overrides the profile, in the precedence above (merge_overrides)."""
        return merge_overrides(self.settings, {key: getattr(self, key) for key in PROFILE_OPTIONS})

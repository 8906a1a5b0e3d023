"""Profiles: named, shipped TOML files that fix a comparison's scenario, driver and ramp.

`harness compare --profile quick` loads `harness/profiles/quick.toml` (`--profile
path/to/mine.toml`: a profile of one's own); command-line options and `--set key=value`
(dotted for the ramp: `--set ramp.stop=100`) override it. A profile's `[servers]` table
adds servers given as commands (harness.frameworks explains its shape).
A profile's `[thresholds]` table holds `rules = ["aiohttp: peak >= 20000", ...]`
(model.thresholds); `--threshold` adds to them. `protocol` is a comma list of
servers.contract.PROTOCOLS (`h1,h1-tls`): every server runs one case per protocol.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.fileset import DEFAULT_FILE_COUNT
from harness.topology import ProcessModel, parse_process_models
from model.errors import UserError
from model.ramps import ConnectionRamp, Ramp, ramp_from_dict
from model.scenarios import SCENARIOS
from model.thresholds import parse_threshold
from servers import FRAMEWORKS
from servers.contract import MONGO_BATCH_LIMIT, MONGO_BATCH_MAX_RECORDS, PROTOCOLS

PROFILES_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "quick"
AFFINITY_MODES = ("both", "server", "agent", "none")  # the affinity study's matrix
AFFINITY_CHOICES = (*AFFINITY_MODES, "matrix")
PRECISION_MIN_ROUNDS = 3  # harness.run.precision.MIN_PRECISE_ROUNDS (profile sits below run)


def parse_protocols(text: str) -> tuple[str, ...]:
    """A comma list of protocols (`h1,h1-tls`), in the order given, each once; ValueError
    names an unknown one."""
    names = tuple(dict.fromkeys(part.strip() for part in str(text).split(",") if part.strip()))
    unknown = [name for name in names if name not in PROTOCOLS]
    if unknown or not names:
        raise ValueError(
            f"protocol {', '.join(unknown) or repr(text)} is not one of {', '.join(PROTOCOLS)}"
        )
    return names


@dataclass(frozen=True)
class Profile:
    """Everything a comparison runs with, identical for every framework."""

    name: str
    description: str
    scenario: str
    driver: str
    ramp: Ramp
    sink: str = "empty"
    warmup_s: float = 3.0
    cooldown_s: float = 1.0
    repeat: int = 1
    probe_interval_s: float = 0.5
    timeout_s: float = 5.0
    affinity: str = "both"
    process_model: str = "single"
    # the protocols compared (comma list of servers.contract.PROTOCOLS): a case per server
    # and protocol, interleaved as process models are
    protocol: str = "h1"
    requests_per_step: int | None = None  # ab -n (a fixed request count instead of a time)
    # h2load: the connections each step's concurrency is multiplexed over, as streams per
    # connection (concurrency 1000 over 10: 100 streams each); None: a connection per request
    multiplexed_connections: int | None = None
    # the handshakes driver: offer the last connection's TLS session (resumed handshakes);
    # "both": each step measures full handshakes, then resumed ones (drivers.handshakes)
    tls_resumption: bool | str = False
    file_count: int = (
        DEFAULT_FILE_COUNT  # the files/gridfs scenarios' file set (the autobench study)
    )
    loop: str | None = None
    mongo_w: int = 1  # write concern of the mongo sink (the WebSocket study used w: 0)
    # the mongo sink's group commit: records per insert_many, at most (1: one insert per
    # record, the seed study's shape; docs/contract.md, sinks)
    mongo_batch: int = MONGO_BATCH_MAX_RECORDS
    # acknowledge a record once it is on disk: the file sink fsyncs each batch, the mongo
    # sink inserts with j: true (docs/contract.md, durability); off, as the studies ran
    durable: bool = False
    # The ramp WebSocket scenarios use (with the agent) when the profile's own is HTTP.
    connection_ramp: ConnectionRamp | None = None
    # confirmation rounds (harness.run.rounds): after the ramp, each framework's peak load
    # is run this many times more, `round_duration_s` each, frameworks interleaved; every
    # figure then carries a 95 % interval. 0: the ramp's figures alone, no intervals.
    rounds: int = 0
    round_duration_s: float = 3.0
    # precision (harness.run.precision): > 0, rounds go on past `rounds` (then the
    # minimum) until every case's peak is within ±precision_pct % at 95 %, `max_rounds`
    # have run, or the next round would end past `max_time_s` of the run's wall time (0: no
    # budget); round lengths and warm-ups are chosen from the first rounds.
    precision_pct: float = 0.0
    max_time_s: float = 0.0
    max_rounds: int = 30
    # threshold rules (model.thresholds), canonical text: the profile's, then --threshold's
    thresholds: tuple[str, ...] = ()
    # servers given as commands: name -> command, or a table (harness.frameworks)
    servers: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.servers, dict):
            raise ValueError(
                "servers must be a table of NAME = COMMAND (or NAME = {command = ...})"
            )
        if self.affinity not in AFFINITY_CHOICES:
            raise ValueError(
                f"affinity {self.affinity!r} is not one of {', '.join(AFFINITY_CHOICES)}"
            )
        if self.repeat < 1:
            raise ValueError(f"repeat must be at least 1, not {self.repeat}")
        if not isinstance(self.rounds, int) or self.rounds < 0 or self.rounds == 1:
            raise ValueError(f"rounds must be 0 or at least 2 (an interval), not {self.rounds!r}")
        if self.round_duration_s <= 0:
            raise ValueError(f"round_duration_s must be positive, not {self.round_duration_s}")
        if not 0 <= self.precision_pct < 100:
            raise ValueError(
                f"precision_pct must be a percentage in 0..100 (0: off), not {self.precision_pct}"
            )
        if self.max_time_s < 0:
            raise ValueError(
                f"max_time_s must not be negative (0: no budget), not {self.max_time_s}"
            )
        if not isinstance(self.max_rounds, int) or self.max_rounds < max(2, self.rounds):
            raise ValueError(
                f"max_rounds must be a whole number >= rounds ({self.rounds}) and >= 2, "
                f"not {self.max_rounds!r}"
            )
        if self.precision_pct and self.rounds < 2:
            raise ValueError("precision_pct needs rounds (at least 2: the minimum per case)")
        if self.warmup_s < 0 or self.cooldown_s < 0:
            raise ValueError("warmup_s and cooldown_s must not be negative")
        if self.probe_interval_s <= 0 or self.timeout_s <= 0:
            raise ValueError("probe_interval_s and timeout_s must be positive")
        parse_process_models(self.process_model)
        parse_protocols(self.protocol)
        if self.file_count < 1:
            raise ValueError(f"file_count must be at least 1, not {self.file_count}")
        if self.mongo_w not in (0, 1):
            raise ValueError(f"mongo_w must be 0 or 1, not {self.mongo_w}")
        if not isinstance(self.mongo_batch, int) or not 1 <= self.mongo_batch <= MONGO_BATCH_LIMIT:
            raise ValueError(
                f"mongo_batch must be in 1..{MONGO_BATCH_LIMIT}, not {self.mongo_batch!r}"
            )
        if self.multiplexed_connections is not None and (
            not isinstance(self.multiplexed_connections, int) or self.multiplexed_connections < 1
        ):
            raise ValueError(
                f"multiplexed_connections must be at least 1, not {self.multiplexed_connections!r}"
            )
        if not isinstance(self.tls_resumption, bool) and self.tls_resumption != "both":
            raise ValueError(
                f'tls_resumption must be true, false or "both", not {self.tls_resumption!r}'
            )
        if not isinstance(self.durable, bool):
            raise ValueError(f"durable must be true or false, not {self.durable!r}")
        if self.durable and self.sink == "mongo" and self.mongo_w == 0:
            raise ValueError("durable needs acknowledged inserts: mongo_w 1, not 0")
        if not isinstance(self.thresholds, tuple):
            raise ValueError(f"thresholds must be a tuple of rules, not {self.thresholds!r}")
        for rule in self.thresholds:
            parse_threshold(rule, FRAMEWORKS)

    @property
    def affinity_modes(self) -> tuple[str, ...]:
        return AFFINITY_MODES if self.affinity == "matrix" else (self.affinity,)

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON has it (tuples as lists): run.json reads back equal."""
        data = dataclasses.asdict(self)
        data["ramp"] = _as_json(dataclasses.asdict(self.ramp))
        if self.connection_ramp is not None:
            data["connection_ramp"] = _as_json(dataclasses.asdict(self.connection_ramp))
        return _as_json(data)

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols compared, in the order given (`h1,h1-tls`)."""
        return parse_protocols(self.protocol)

    @property
    def process_models(self) -> list[ProcessModel]:
        """The process models compared (comma-separated; the process-model study has four)."""
        return parse_process_models(self.process_model)


def profile_names() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.toml"))


def _convert(value: str) -> Any:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def load_profile(name: str, overrides: dict[str, Any] | None = None) -> Profile:
    """The shipped profile `name` (or the profile file `name`, a path ending in .toml) with
    `overrides` applied; UserError names a bad value."""
    path = PROFILES_DIR / f"{name}.toml"
    if name.endswith(".toml"):
        path = Path(name)
        name = path.stem
    if not path.is_file():
        raise UserError(
            f"unknown profile {name}: choose from {', '.join(profile_names())}, or give a "
            "profile file (path/to/mine.toml)"
        )
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"profile {path}: {error}") from None
    rules = _profile_rules(name, data.pop("thresholds", {}))
    ramp_data = dict(data.pop("ramp", {}))
    connection_data = dict(data.pop("connection_ramp", {}))
    if connection_data:
        connection_data.setdefault("kind", "connections")
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if isinstance(value, str) and key not in ("scenario", "driver", "sink", "protocol"):
            value = _convert(value)
        if key == "thresholds":  # --threshold (repeatable) adds to the profile's rules
            rules += [value] if isinstance(value, str) else list(value)
        elif key.startswith("ramp."):
            ramp_data[key.removeprefix("ramp.")] = value
        elif key.startswith("connection_ramp."):
            connection_data[key.removeprefix("connection_ramp.")] = value
        elif key in ("connections", "mode"):  # the connection ramp's target, load|stress
            field_name = "target" if key == "connections" else "mode"
            (connection_data if connection_data else ramp_data)[field_name] = value
        elif key == "duration_s":  # the step length, whatever the ramp calls it
            ramp_data["hold_s" if ramp_data.get("kind") == "connections" else "duration_s"] = value
            if connection_data:
                connection_data["hold_s"] = value
        else:
            data[key] = value
    if data.get("precision_pct") and not data.get("rounds"):  # --precision on a profile
        data["rounds"] = PRECISION_MIN_ROUNDS  # without rounds: the precision's minimum
    known = {f.name for f in dataclasses.fields(Profile)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise UserError(f"profile {name}: unknown setting {', '.join(unknown)}")
    try:
        ramp = ramp_from_dict(ramp_data)
        connection_ramp = ramp_from_dict(connection_data) if connection_data else None
    except (ValueError, TypeError) as error:
        raise UserError(f"profile {name}: {error}") from None
    scenario = SCENARIOS.get(str(data.get("scenario")))
    if scenario is not None and scenario.websocket and ramp.kind != "connections":
        if connection_ramp is None:
            raise UserError(
                f"profile {name} has no connection ramp for the WebSocket scenario "
                f"{scenario.name}: use --profile ws-ramp"
            )
        ramp, data["driver"] = connection_ramp, "agent"
    if scenario is not None and scenario.protocol == "memcached" and ramp.kind == "concurrency":
        data["driver"] = "mcload"  # the socket service speaks memcached, not HTTP
    try:
        data["thresholds"] = tuple(
            dict.fromkeys(parse_threshold(rule, FRAMEWORKS).text for rule in rules)
        )
        return Profile(name=name, ramp=ramp, connection_ramp=connection_ramp, **data)  # type: ignore[arg-type]
    except (ValueError, TypeError) as error:
        raise UserError(f"profile {name}: {error}") from None


def _profile_rules(name: str, table: Any) -> list[str]:
    """The rules of a profile's `[thresholds]` table (`rules = [...]`)."""
    if not isinstance(table, dict) or set(table) - {"rules"}:
        raise UserError(
            f'profile {name}: [thresholds] holds only rules = ["aiohttp: peak >= 20000", ...]'
        )
    rules = table.get("rules", [])
    if not isinstance(rules, list) or not all(isinstance(rule, str) for rule in rules):
        raise UserError(f"profile {name}: [thresholds] rules must be a list of strings")
    return list(rules)


def parse_settings(settings: list[str]) -> dict[str, str]:
    """`--set key=value` pairs as a dict; a pair without '=' is refused."""
    parsed = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise UserError(f"--set {setting!r} is not key=value (e.g. ramp.stop=100)")
        parsed[key.strip()] = value.strip()
    return parsed


def _as_json(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its tuples as lists, as json.loads gives them back."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

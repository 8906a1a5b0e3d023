"""Profiles: named, shipped TOML files that fix a comparison's scenario, driver and ramp.

`harness compare --profile quick` loads `harness/profiles/quick.toml` (`--profile
path/to/mine.toml`: a profile of one's own); `--set key=value` (dotted for the ramp:
`--set ramp.stop=100`) and the named options override it, in the order
harness.run_options writes down; `setting_keys()` lists every key `--set` takes. A
profile's `[servers]` table adds servers given as commands (harness.frameworks explains
its shape).
A profile's `[thresholds]` table holds `rules = ["aiohttp: peak >= 20000", ...]`
(model.thresholds); `--threshold` adds to them. `protocol` is a comma list of
servers.contract.PROTOCOLS (`h1,h1-tls`): every server runs one case per protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.services.fileset import DEFAULT_FILE_COUNT
from harness.topology import ProcessModel, parse_process_models
from model.errors import UsageError, UserError
from model.ramps import RAMP_KINDS, ConnectionRamp, Ramp, kinds_taking, ramp_from_dict, ramp_keys
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
    # verify's deviations (harness.verify.severity): false, a warning and the server is
    # measured; true, a failure unless the server declares it (as --strict-verify)
    strict_verify: bool = False
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
        if not isinstance(self.strict_verify, bool):
            raise ValueError(f"strict_verify must be true or false, not {self.strict_verify!r}")
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


# each field's type, for reading a `--set` value as one
_FIELD_TYPES = typing.get_type_hints(Profile)


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
    given: dict[str, Any] = {}  # the --set keys of each ramp table, and their values
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key.startswith(("ramp.", "connection_ramp.")):
            given[key] = value
        if isinstance(value, str):
            value = _setting_value(key, value)
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
        raise UserError(_unknown_setting(name, unknown, known, ramp_data.get("kind")))
    scenario_name = str(data.get("scenario"))
    for section, table, other in (
        ("ramp", ramp_data, connection_data),
        ("connection_ramp", connection_data, ramp_data),
    ):
        misplaced = _misplaced_ramp_key(name, section, table, other, given, scenario_name)
        if misplaced is not None:
            raise UserError(misplaced)
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


# each ramp's step length, by the other's name for it (what `--duration` sets)
STEP_LENGTH_KEYS = {"duration_s": "hold_s", "hold_s": "duration_s"}


def _ramp_kind_text(kind: str) -> str:
    return f"a {kind} ramp ({', '.join(ramp_keys(kind))})"


def _unknown_setting(name: str, unknown: list[str], known: set[str], kind: Any) -> str:
    """One line: the settings the profile does not know, what it takes, the likely one."""
    guesses = [g for key in unknown for g in difflib.get_close_matches(key, known, 1)]
    ramp = f"; ramp.KEY for its ramp, {_ramp_kind_text(kind)}" if kind in RAMP_KINDS else ""
    return (
        f"profile {name}: unknown setting {', '.join(unknown)}"
        + (f" (did you mean {', '.join(guesses)}?)" if guesses else "")
        + f": it takes {', '.join(sorted(known - {'name', 'ramp', 'connection_ramp'}))}{ramp}"
    )


def shipped_profiles_taking(kinds: list[str], scenario: str | None = None) -> list[str]:
    """The shipped profiles whose ramp is one of `kinds`, those of `scenario` first."""
    found = []
    for profile in profile_names():
        try:
            data = tomllib.loads((PROFILES_DIR / f"{profile}.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue
        if (data.get("ramp") or {}).get("kind") in kinds:
            found.append((data.get("scenario") != scenario, profile))
    return [profile for _, profile in sorted(found)]


def _misplaced_ramp_key(
    name: str,
    section: str,
    table: dict[str, Any],
    other: dict[str, Any],
    given: dict[str, Any],
    scenario: str | None,
) -> str | None:
    """One line for the first key of a ramp table (`ramp`, `connection_ramp`) that its
    ramp's kind does not take: where it came from (`--set ramp.hold_s=5`, or the profile
    file), which ramp is in use and the keys it takes, and what was probably meant — the
    profile's other ramp, a shipped profile whose ramp takes it, or a near key. None when
    every key fits (or the kind is unknown: ramp_from_dict names that)."""
    kind = table.get("kind")
    if kind not in RAMP_KINDS:
        return None
    for key, value in table.items():
        if key == "kind" or key in ramp_keys(kind):
            continue
        option = f"{section}.{key}"
        where = f"--set {option}={given[option]}" if option in given else f"[{section}] {key}"
        said = f"profile {name}: {where}: its {section} is {_ramp_kind_text(kind)}"
        takers = kinds_taking(key)
        meant = []
        other_section = "connection_ramp" if section == "ramp" else "ramp"
        value_text = given.get(option, value)
        step_length = STEP_LENGTH_KEYS.get(key)
        websocket = (scenario_info := SCENARIOS.get(str(scenario))) is not None and (
            scenario_info.websocket
        )
        runs_other = websocket and section == "ramp" and kind != "connections"
        if step_length in ramp_keys(kind) and not runs_other:
            meant.append(f"--set {section}.{step_length}={value_text} (its step length)")
        if other.get("kind") in takers:
            runs = ", which WebSocket scenarios run" if other_section == "connection_ramp" else ""
            meant.append(
                f"--set {other_section}.{key}={value_text} "
                f"(this profile's {other.get('kind')} ramp{runs})"
            )
        profiles = [p for p in shipped_profiles_taking(takers, scenario) if p != name]
        if profiles:
            rest = f" (or {', '.join(profiles[1:4])})" if len(profiles) > 1 else ""
            meant.append(f"--profile {profiles[0]}{rest}, whose ramp takes {key}")
        if takers:
            said += f"; {key} is a key of {' and '.join(f'a {k} ramp' for k in takers)}"
        else:
            near = difflib.get_close_matches(key, ramp_keys(kind), 1)
            if near:
                meant.append(f"--set {section}.{near[0]}=…")
        return said + (f": use {', or '.join(meant)}" if meant else "")
    return None


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
    """`--set key=value` pairs as a dict (the last of a key wins); a pair without '=' is
    a UsageError."""
    parsed = {}
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {setting!r} is not key=value (e.g. ramp.stop=100)")
        parsed[key.strip()] = value.strip()
    return parsed


# a profile's fields that --set does not reach: its name, its ramps as tables (their keys
# are `ramp.KEY`), its servers (a table of commands: --server and --servers give those)
NOT_SETTINGS = ("name", "ramp", "connection_ramp", "servers")
# --set's keys beside the profile's fields, as the named options of the same name: the
# step length whatever the ramp calls it, the connection ramp's target and mode
SETTING_ALIASES = ("duration_s", "connections", "mode")


def setting_keys() -> tuple[str, ...]:
    """Every key `--set` takes: the profile's fields (`sink`), the aliases above, and the
    ramps' keys (`ramp.stop`, `connection_ramp.hold_s`)."""
    fields = [f.name for f in dataclasses.fields(Profile) if f.name not in NOT_SETTINGS]
    ramp = dict.fromkeys(key for kind in RAMP_KINDS for key in ramp_keys(kind))
    return (
        *fields,
        *SETTING_ALIASES,
        "ramp.kind",
        *(f"ramp.{key}" for key in ramp),
        *(f"connection_ramp.{key}" for key in ramp_keys("connections")),
    )


def check_setting_keys(settings: Mapping[str, object]) -> None:
    """UsageError, one line listing the keys that exist, for a `--set` key that is none
    of them (a near one suggested)."""
    keys = setting_keys()
    for key, value in settings.items():
        if key not in keys:
            near = difflib.get_close_matches(key, keys, 1)
            guess = f" (did you mean {near[0]}?)" if near else ""
            raise UsageError(
                f"--set {key}={value}: unknown key {key}{guess}; keys: {', '.join(keys)}"
            )


def _setting_value(key: str, text: str) -> Any:
    """A `--set` value as its profile field's type (`repeat=3`: 3, `durable=true`: True);
    a UsageError, one line, when it is not one. A ramp's key (and the aliases) is
    guessed: the ramp checks its own values (model.ramps names a bad one)."""
    hint = _FIELD_TYPES.get(key)
    if hint is None or key in NOT_SETTINGS:
        return _convert(text)
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if bool in kinds and text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        if kind in kinds:
            with contextlib.suppress(ValueError):
                return kind(text)
    if str in kinds or key == "thresholds":  # a rule's text (model.thresholds reads it)
        return text
    wanted = {bool: "true or false", int: "a whole number", float: "a number"}
    takes = " or ".join(wanted[kind] for kind in kinds if kind in wanted)
    raise UsageError(f"--set {key}={text}: {key} takes {takes}")


def _as_json(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its tuples as lists, as json.loads gives them back."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

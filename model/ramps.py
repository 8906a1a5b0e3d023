"""Load ramps as data: each yields the steps a run applies identically to every framework.

- `RateRamp` (autobench/httperf): open-loop connection rates, `calls_per_connection`
  requests on each, `connections_per_step` connections per step, a reply timeout.
- `ConcurrencyRamp` (wrk/siege/ab): closed-loop concurrency levels, each for `duration_s`.
- `ConnectionRamp` (the WebSocket agent): connection counts opened at `open_rate_per_s`.
- `ConstantRateRamp` (oha): open loop, requests sent on a fixed schedule at each offered
  rate of a list for `duration_s`, whatever the replies do.
- `AttackRoundsRamp` (h2load and one hostile HTTP/2 connection): a paced request rate in
  rounds without and with one attacking connection (harness.run.attack_case).
A ramp is a plain iterable of `RampStep`s, unit-tested without any network.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal

from model.figures import figure

StepUnit = Literal["req/s", "concurrency", "conns"]
# how a connection ramp's agents close their connections at its end (ConnectionRamp.close)
CLOSE_MODES = ("orderly", "drop")


@dataclass(frozen=True)
class RampStep:
    """One step: the offered load and how long (or how many connections) it runs."""

    index: int
    offered: float
    unit: StepUnit
    duration_s: float | None = None  # concurrency and connection steps
    connections: int | None = None  # rate steps: connections opened in the step


def _levels(low: float, high: float, step: float) -> list[float]:
    if step <= 0:
        raise ValueError(f"ramp step must be positive, not {step}")
    if low <= 0 or high < low:
        raise ValueError(f"ramp bounds must satisfy 0 < low <= high, not {low}..{high}")
    count = round((high - low) / step) + 1
    return [low + i * step for i in range(count) if low + i * step <= high + 1e-9]


@dataclass(frozen=True)
class RateRamp:
    """autobench: connection rate low → high by step; each connection makes N calls.

    The offered request rate of a step is rate × calls_per_connection; autobench charts
    against that "demanded" request rate, and so do we.
    """

    low: float
    high: float
    step: float
    calls_per_connection: int = 10
    connections_per_step: int = 6000
    timeout_s: float = 5.0
    kind: Literal["rate"] = "rate"

    def __post_init__(self) -> None:
        _levels(self.low, self.high, self.step)
        if self.calls_per_connection < 1:
            raise ValueError(f"calls_per_connection must be >= 1, not {self.calls_per_connection}")
        if self.connections_per_step < 1:
            raise ValueError(f"connections_per_step must be >= 1, not {self.connections_per_step}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, not {self.timeout_s}")

    def __iter__(self) -> Iterator[RampStep]:
        for index, rate in enumerate(_levels(self.low, self.high, self.step)):
            yield RampStep(
                index,
                offered=rate * self.calls_per_connection,
                unit="req/s",
                duration_s=self.connections_per_step / rate,
                connections=self.connections_per_step,
            )


@dataclass(frozen=True)
class ConcurrencyRamp:
    """wrk/siege/ab/h2load: concurrency start → stop by step, or the rising `levels` listed
    (10, 100, 1000: what a step cannot reach), each held for duration_s."""

    start: int = 0  # 0 with `levels`
    stop: int = 0
    step: int = 0
    duration_s: float = 10.0
    levels: tuple[int, ...] = ()
    kind: Literal["concurrency"] = "concurrency"

    def __post_init__(self) -> None:
        levels = self.levels
        if isinstance(levels, str):  # `--set ramp.levels=10,100,1000`
            levels = tuple(int(level) for level in levels.split(",") if level.strip())
        elif isinstance(levels, int):
            levels = (levels,)
        object.__setattr__(self, "levels", tuple(int(level) for level in levels))
        if self.levels:
            if self.start or self.stop or self.step:
                raise ValueError("a concurrency ramp has levels or start/stop/step, not both")
            if any(level < 1 for level in self.levels) or list(self.levels) != sorted(
                set(self.levels)
            ):
                raise ValueError(f"levels must be positive and rise, each once: {self.levels}")
        else:
            _levels(self.start, self.stop, self.step)
        if self.duration_s <= 0:
            raise ValueError(f"duration_s must be positive, not {self.duration_s}")

    def __iter__(self) -> Iterator[RampStep]:
        levels = self.levels or _levels(self.start, self.stop, self.step)
        for index, level in enumerate(levels):
            yield RampStep(
                index, offered=int(level), unit="concurrency", duration_s=self.duration_s
            )


@dataclass(frozen=True)
class ConnectionRamp:
    """The WebSocket agent: connection counts start → target by step, each held hold_s.

    `load` mode holds every step for hold_s and samples; `stress` mode also stops at the
    breaking point (the runner ends the ramp there). At the ramp's end the agents close
    every connection in one step, as `close` says — `orderly`: a close frame and a FIN on
    each; `drop`: the agent processes exit and the kernel closes all their sockets at once,
    as when a client is killed — and the runner measures that closing step (the summary's
    `closing`: harness.connections.closing_record).
    """

    start: int
    target: int
    step: int
    hold_s: float = 15.0
    open_rate_per_s: float = 200.0  # one new connection every 5 ms (the WebSocket study)
    mode: Literal["load", "stress"] = "load"
    close: Literal["orderly", "drop"] = "orderly"
    # the host memory the ramp leaves free: below it the ramp ends, its breaking point the
    # memory's (harness.connections); None: 5 % of the host's, at least 1 GiB
    memory_reserve_gib: float | None = None
    kind: Literal["connections"] = "connections"

    def __post_init__(self) -> None:
        _levels(self.start, self.target, self.step)
        if self.hold_s <= 0 or self.open_rate_per_s <= 0:
            raise ValueError("hold_s and open_rate_per_s must be positive")
        if self.memory_reserve_gib is not None and self.memory_reserve_gib <= 0:
            raise ValueError("memory_reserve_gib must be positive")
        if self.mode not in ("load", "stress"):
            raise ValueError(f"mode {self.mode!r} is not load or stress")
        if self.close not in CLOSE_MODES:
            raise ValueError(f"close {self.close!r} is not one of {', '.join(CLOSE_MODES)}")

    def __iter__(self) -> Iterator[RampStep]:
        for index, count in enumerate(_levels(self.start, self.target, self.step)):
            yield RampStep(index, offered=int(count), unit="conns", duration_s=self.hold_s)

    @property
    def planned_s(self) -> float:
        """How long the ramp takes at its open rate: each step's new connections opened at
        open_rate_per_s, then held hold_s."""
        levels = _levels(self.start, self.target, self.step)
        opened = [b - a for a, b in zip([0.0, *levels], levels, strict=False)]
        return sum(n / self.open_rate_per_s + self.hold_s for n in opened)


@dataclass(frozen=True)
class ConstantRateRamp:
    """Open loop (oha): each step offers one request rate (req/s) for `duration_s`, every
    request sent at its scheduled time whatever the replies do, its latency counted from
    that time (so a stalled server is charged for every request it held up).

    `rates` is the same list for every framework: their latencies are compared at equal
    load. `connections` bounds the requests in flight (oha -c); a request due while all
    are busy waits for one, and its wait is part of its latency. With
    `stop_when_saturated` the ramp ends after the first step that did not hold (the
    runner's test: errors, too little achieved, or p99 above `saturation_p99_ms`), so a
    ramp to saturation costs each framework only the steps it can take, plus one.
    """

    rates: tuple[float, ...]
    duration_s: float = 5.0
    connections: int = 100
    stop_when_saturated: bool = False
    saturation_p99_ms: float = 1000.0
    kind: Literal["constant-rate"] = "constant-rate"

    def __post_init__(self) -> None:
        rates = self.rates
        if isinstance(rates, str):  # `--set ramp.rates=500,1000,2000`
            rates = tuple(float(r) for r in rates.split(",") if r.strip())
        elif isinstance(rates, int | float):
            rates = (float(rates),)
        object.__setattr__(self, "rates", tuple(float(r) for r in rates))
        if not self.rates:
            raise ValueError("rates must list at least one offered rate (req/s)")
        if any(r <= 0 for r in self.rates):
            raise ValueError(f"rates must be positive, not {list(self.rates)}")
        if list(self.rates) != sorted(set(self.rates)):
            raise ValueError(f"rates must rise, each once, not {list(self.rates)}")
        if self.duration_s <= 0 or self.saturation_p99_ms <= 0:
            raise ValueError("duration_s and saturation_p99_ms must be positive")
        if self.connections < 1:
            raise ValueError(f"connections must be >= 1, not {self.connections}")

    def __iter__(self) -> Iterator[RampStep]:
        for index, rate in enumerate(self.rates):
            yield RampStep(index, offered=rate, unit="req/s", duration_s=self.duration_s)


@dataclass(frozen=True)
class AttackRoundsRamp:
    """What one hostile HTTP/2 connection costs the well-behaved clients: `clients` h2load
    connections send a paced rate (`--rps` each, `streams` in flight at most on each) in
    rounds of `round_s`, each attack's rounds paired with rounds without any attack,
    `pairs` pairs per attack. The rate is `rate_per_s` when set, else `load_fraction` of
    the server's closed-loop peak, measured for `peak_s` at the case's start with
    `peak_concurrency` requests in flight. `attacks`: verify's attack names
    (harness.verify.h2_attacks.ATTACKS; the case refuses one it does not know)."""

    attacks: tuple[str, ...] = ()
    pairs: int = 3
    round_s: float = 4.0
    clients: int = 10
    streams: int = 4
    load_fraction: float = 0.5
    rate_per_s: float = 0.0  # 0: load_fraction of the measured peak
    peak_s: float = 2.0
    peak_concurrency: int = 100
    kind: Literal["h2-attacks"] = "h2-attacks"

    def __post_init__(self) -> None:
        attacks = self.attacks
        if isinstance(attacks, str):  # `--set ramp.attacks=h2-ping-flood,h2-rapid-reset`
            attacks = tuple(a.strip() for a in attacks.split(",") if a.strip())
        object.__setattr__(self, "attacks", tuple(str(a) for a in attacks))
        if not self.attacks or len(set(self.attacks)) != len(self.attacks):
            raise ValueError(f"attacks must list at least one, each once, not {list(self.attacks)}")
        if not isinstance(self.pairs, int) or self.pairs < 2:
            raise ValueError(f"pairs must be at least 2 (an interval), not {self.pairs!r}")
        if self.round_s <= 0 or self.peak_s <= 0:
            raise ValueError("round_s and peak_s must be positive")
        if self.clients < 1 or self.streams < 1 or self.peak_concurrency < self.clients:
            raise ValueError("clients and streams must be >= 1, peak_concurrency >= clients")
        if self.peak_concurrency % self.clients:
            raise ValueError(
                f"peak_concurrency {self.peak_concurrency} must split evenly over "
                f"{self.clients} clients"
            )
        if not 0 < self.load_fraction <= 1:
            raise ValueError(f"load_fraction must be in (0, 1], not {self.load_fraction}")
        if self.rate_per_s < 0:
            raise ValueError(f"rate_per_s must be >= 0 (0: measured), not {self.rate_per_s}")

    def __iter__(self) -> Iterator[RampStep]:
        # the peak round (unless the rate is given), then one step per round, each attack's
        # beside one without; the rate is the case's to measure (harness.run.attack_case)
        first = 0
        if not self.rate_per_s:
            first = 1
            yield RampStep(0, self.peak_concurrency, "concurrency", duration_s=self.peak_s)
        for index in range(first, first + 2 * self.pairs * len(self.attacks)):
            yield RampStep(index, offered=self.rate_per_s, unit="req/s", duration_s=self.round_s)


Ramp = RateRamp | ConcurrencyRamp | ConnectionRamp | ConstantRateRamp | AttackRoundsRamp
RAMP_KINDS: dict[str, type] = {
    "rate": RateRamp,
    "concurrency": ConcurrencyRamp,
    "connections": ConnectionRamp,
    "constant-rate": ConstantRateRamp,
    "h2-attacks": AttackRoundsRamp,
}


def ramp_keys(kind: str) -> tuple[str, ...]:
    """The keys a ramp of `kind` takes (`kind` itself aside), in their declared order."""
    return tuple(f.name for f in fields(RAMP_KINDS[kind]) if f.name != "kind")


def kinds_taking(key: str) -> list[str]:
    """The ramp kinds that take `key` (`hold_s`: connections)."""
    return [kind for kind in RAMP_KINDS if key in ramp_keys(kind)]


def ramp_from_dict(data: dict[str, object]) -> Ramp:
    """A ramp from a profile table (`kind = "rate"` etc.); ValueError names what is wrong:
    an unknown kind, a key the kind does not take (with the keys it does), a bad value."""
    values = dict(data)
    kind = values.pop("kind", None)
    if kind not in RAMP_KINDS:
        raise ValueError(f"ramp kind {kind!r} is not one of {', '.join(RAMP_KINDS)}")
    accepted = ramp_keys(str(kind))
    unknown = [key for key in values if key not in accepted]
    if unknown:
        raise ValueError(f"a {kind} ramp takes {', '.join(accepted)}; not {', '.join(unknown)}")
    types = {f.name: f.type for f in fields(RAMP_KINDS[kind])}
    for key, value in values.items():
        number = types[key] in ("int", "float")
        if number and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{kind} ramp: {key} must be a number, not {value!r}")
    try:
        return RAMP_KINDS[kind](**values)
    except TypeError as error:  # a value of the wrong type, compared or converted
        raise ValueError(f"{kind} ramp ({', '.join(accepted)}): {error}") from None


def ramp_text(ramp: Ramp) -> str:
    """The ramp as run, in one line: what a profile's description says of its default ramp,
    from the values a run used (`--set ramp.*`, `--connections`, `--mode` included)."""
    if isinstance(ramp, RateRamp):
        return (
            f"connection rate {figure(ramp.low)}→{figure(ramp.high)}/s step {figure(ramp.step)}, "
            f"{ramp.calls_per_connection} calls each, {figure(ramp.connections_per_step)} "
            "connections a step"
        )
    if isinstance(ramp, ConcurrencyRamp):
        levels = (
            ", ".join(figure(level) for level in ramp.levels)
            if ramp.levels
            else f"{figure(ramp.start)}→{figure(ramp.stop)} step {figure(ramp.step)}"
        )
        return f"concurrency {levels}, {figure(ramp.duration_s)} s a step"
    if isinstance(ramp, ConnectionRamp):
        return (
            f"connections {figure(ramp.start)}→{figure(ramp.target)} step {figure(ramp.step)}, "
            f"opened at {figure(ramp.open_rate_per_s)}/s, each step held "
            f"{figure(ramp.hold_s)} s, {ramp.mode} mode, {ramp.close} close"
        )
    if isinstance(ramp, AttackRoundsRamp):
        rate = (
            f"{figure(ramp.rate_per_s)} req/s"
            if ramp.rate_per_s
            else f"{ramp.load_fraction * 100:g} % of the closed-loop peak"
        )
        attacks = ", ".join(ramp.attacks)
        return (
            f"{rate} over {ramp.clients} h2 clients, {ramp.pairs} pairs of "
            f"{figure(ramp.round_s)} s rounds without and with one attacking connection "
            f"({attacks})"
        )
    rates = ", ".join(figure(rate) for rate in ramp.rates)
    return f"open-loop rates {rates} req/s, {figure(ramp.duration_s)} s each"


def ramps_text(ramp: Ramp, connection_ramp: Ramp | None = None) -> str:
    """A profile's ramps as run: its ramp, and the one its WebSocket scenarios take where
    it has one of its own."""
    text = ramp_text(ramp)
    if connection_ramp is not None:
        text += f"; WebSocket scenarios: {ramp_text(connection_ramp)}"
    return text

"""What `harness bench http` and `harness bench ws` were asked, checked, and what they will
measure: the options of each as one record, and the plan made of them (which frameworks,
on which protocols, what was skipped and why). A user's mistake is a UserError naming it.

The measuring itself is harness.bench (wrk, GET /) and harness.bench_ws (idle WebSocket
connections); the results directory is harness.bench_record.
"""

from __future__ import annotations

import dataclasses
import resource
from dataclasses import dataclass, field
from typing import Any

from harness.affinity import parse_cpu_list
from harness.run_options import RunOptions
from model.errors import UserError
from servers import FRAMEWORKS


def _check_cpus(spec: str) -> None:
    parse_cpu_list(spec)  # UserError naming what is wrong


def shared_config(run: RunOptions) -> dict[str, Any]:
    """What run.json's `config` records of the options a bench shares with compare."""
    return {
        "frameworks": run.frameworks, "loop": run.loop, "server_cpus": run.server_cpus,
        "load_cpus": run.load_cpus, "servers": list(run.servers),
        "servers_file": str(run.servers_file) if run.servers_file else None,
    }  # fmt: skip


def _with_cpus(run: RunOptions) -> RunOptions:
    """`run` with its CPUs chosen as compare chooses them where not given
    (harness.run.default_cpus: the server on the first, the load on the rest)."""
    if run.server_cpus is not None and run.load_cpus is not None:
        return run
    from harness.run import default_cpus

    server, load = default_cpus()
    return dataclasses.replace(
        run, server_cpus=run.server_cpus or server, load_cpus=run.load_cpus or load
    )


@dataclass(frozen=True)
class HttpBenchOptions:
    """`harness bench http`: wrk against ours and the minimal app, to a precision. The
    options it shares with compare (frameworks, loop, CPUs, results root, servers,
    protocol, TLS certificate) are `common`'s (harness.run_options.RunOptions)."""

    common: RunOptions
    connections: int = 100
    rounds: int = 10
    duration_s: float = 3.0
    precision_pct: float = 3.0
    max_time_s: float = 240.0
    max_rounds: int = 60
    cpu_profile: bool = False  # each app sampled through one more run (harness.bench_profile)

    def __post_init__(self) -> None:
        object.__setattr__(self, "common", _with_cpus(self.common))

    def config(self) -> dict[str, Any]:
        own = {
            "connections": self.connections, "rounds": self.rounds,
            "duration_s": self.duration_s, "precision_pct": self.precision_pct,
            "max_time_s": self.max_time_s, "max_rounds": self.max_rounds,
            "protocol": self.common.protocol or "h1", "tls_cert": bool(self.common.tls_cert),
            "cpu_profile": self.cpu_profile,
        }  # fmt: skip
        return shared_config(self.common) | own


@dataclass(frozen=True)
class HttpBenchPlan:
    """The (framework, protocol) pairs to bench, and those skipped with the reason."""

    options: HttpBenchOptions
    protocols: list[str]
    pairs: list[tuple[str, str]]
    skipped: list[str] = field(default_factory=list)


def plan_http_bench(options: HttpBenchOptions) -> HttpBenchPlan:
    """Check the options and choose what to bench (UserError on a mistake)."""
    from drivers.wrk import WrkDriver
    from harness.bench import bench_unsupported
    from harness.frameworks import register_servers, select_frameworks, server_option_names
    from harness.profile import parse_protocols
    from harness.tools import tool_path

    try:
        protocols = parse_protocols(options.common.protocol or "h1")
    except ValueError as error:
        raise UserError(f"--protocol: {error}") from None
    unspoken = [p for p in protocols if p not in WrkDriver.protocols]
    if unspoken:
        raise UserError(
            f"bench runs wrk, which does not speak {', '.join(unspoken)} "
            f"(it speaks {', '.join(WrkDriver.protocols)})"
        )
    if (options.common.tls_cert is None) != (options.common.tls_key is None):
        raise UserError("--tls-cert and --tls-key go together (a certificate and its key)")
    common = options.common
    register_servers(list(common.servers), common.servers_file)
    # baselines have no minimal app: bench measures our server against the framework's own
    chosen = select_frameworks(common.frameworks, server_option_names(common.servers))
    names = [n for n in chosen if FRAMEWORKS[n].role == "framework" and FRAMEWORKS[n].has_minimal]
    if not names:
        raise UserError(
            "bench compares frameworks with their minimal apps; none of "
            f"{', '.join(chosen)} has one (a servers file's table gives one: minimal = ...)"
        )
    _check_http_numbers(options)
    if tool_path("wrk") is None:
        raise UserError("wrk not found: run `harness doctor --install`")
    every = [(n, p) for n in names for p in protocols]
    reasons = {pair: bench_unsupported(*pair) for pair in every}
    skipped = [f"{n} on {p}: not supported: {why}" for (n, p), why in reasons.items() if why]
    pairs = [pair for pair, why in reasons.items() if why is None]
    return HttpBenchPlan(options, protocols, pairs, skipped)


def _check_http_numbers(options: HttpBenchOptions) -> None:
    _check_cpus(options.common.server_cpus or "")
    _check_cpus(options.common.load_cpus or "")
    if options.rounds < 2 or options.max_rounds < options.rounds:
        raise UserError(
            f"--rounds must be at least 2 and --max-rounds at least it ({options.rounds})"
        )
    if not 0 <= options.precision_pct < 100 or options.max_time_s < 0:
        raise UserError("--precision is a percentage in 0..100 and --max-time seconds >= 0")


@dataclass(frozen=True)
class WsBenchOptions:
    """`harness bench ws`: idle WebSocket connections on ours and the minimal server. The
    options it shares with compare (frameworks, loop, CPUs, results root, servers, the
    fleet and its access) are `common`'s (harness.run_options.RunOptions)."""

    common: RunOptions
    connections_asked: int | None = None  # None: WS_BENCH_CONNECTIONS
    rounds_asked: int | None = None  # None: WS_BENCH_ROUNDS
    hold_s: float = 3.0
    open_rate: float | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "common", _with_cpus(self.common))

    @property
    def connections(self) -> int:
        from harness.bench_ws import WS_BENCH_CONNECTIONS

        asked = self.connections_asked
        return asked if asked is not None else WS_BENCH_CONNECTIONS

    @property
    def rounds(self) -> int:
        from harness.bench_ws import WS_BENCH_ROUNDS

        return self.rounds_asked if self.rounds_asked is not None else WS_BENCH_ROUNDS

    def config(self, processes: int) -> dict[str, Any]:
        own = {
            "connections": self.connections, "rounds": self.rounds, "hold_s": self.hold_s,
            "open_rate": self.open_rate, "workers": processes, "fleet": self.common.fleet,
        }  # fmt: skip
        return shared_config(self.common) | own


@dataclass(frozen=True)
class WsBenchPlan:
    """The frameworks to bench, each app's processes, and those skipped with the reason."""

    options: WsBenchOptions
    names: list[str]
    processes: int
    skipped: list[str] = field(default_factory=list)


def plan_ws_bench(options: WsBenchOptions) -> WsBenchPlan:
    """Check the options and choose what to bench (UserError on a mistake)."""
    from harness.bench_ws import ws_bench_unsupported
    from harness.frameworks import register_servers, select_frameworks, server_option_names

    common = options.common
    register_servers(list(common.servers), common.servers_file)
    chosen = select_frameworks(common.frameworks, server_option_names(common.servers))
    skipped = []
    if common.frameworks != "all":  # `all` skips those without one quietly
        skipped = [f"{n}: {why}" for n in chosen if (why := ws_bench_unsupported(n))]
    names = [name for name in chosen if ws_bench_unsupported(name) is None]
    missing = {name: FRAMEWORKS[name].missing() for name in names}
    skipped += [f"{n}: not installed: {', '.join(what)}" for n, what in missing.items() if what]
    names = [name for name in names if not missing[name]]
    if not names:
        raise UserError(
            f"bench --ws: none of {', '.join(chosen)} has a minimal WebSocket server installed"
        )
    processes = _check_ws_numbers(options, names)
    return WsBenchPlan(options, names, processes, skipped)


def _check_ws_numbers(options: WsBenchOptions, names: list[str]) -> int:
    """Check the numbers; returns each app's processes (--workers, or as the connections
    need past one process's open files)."""
    from drivers.agent.plan import FD_HEADROOM
    from harness.bench_ws import WS_BENCH_STEPS, ws_workers

    _check_cpus(options.common.server_cpus or "")
    _check_cpus(options.common.load_cpus or "")
    connections, workers = options.connections, options.workers
    open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if workers is not None and workers < 1:
        raise UserError("--workers must be 1 or more")
    processes = workers if workers is not None else ws_workers(connections, open_files)
    sockets_max = processes * (open_files - FD_HEADROOM)
    if not WS_BENCH_STEPS * 2 <= connections <= sockets_max:
        raise UserError(
            f"--connections must be {WS_BENCH_STEPS * 2}..{sockets_max:,} with --ws and "
            f"{processes} worker(s) (one server process may open {open_files - FD_HEADROOM:,} "
            "sockets here: the open-files limit; more --workers hold more)"
        )
    if (
        options.rounds < 2
        or options.hold_s < 1
        or (options.open_rate is not None and options.open_rate <= 0)
    ):
        raise UserError("--ws needs --rounds >= 2, --hold >= 1 s and a positive --open-rate")
    if processes > 1:  # past one process: what plan-connections would refuse, refused
        refusal = _ws_plan_refusal(names, options, processes)
        if refusal:
            raise UserError(f"bench --ws: {refusal}")
    return processes


def _ws_plan_refusal(names: list[str], options: WsBenchOptions, workers: int) -> str | None:
    """Why this host cannot hold the connections for the measured ones of `names` (harness
    plan-connections' arithmetic: memory, conntrack), or None."""
    from harness.bench_ws import WS_BENCH_STEPS, ws_ramp
    from harness.connection_plan import SERVER_MEMORY, plan_connections, plan_refusal
    from harness.doctor import connection_host

    connections = options.connections
    ramp = ws_ramp(connections, options.hold_s, options.open_rate, workers)
    plan = plan_connections(
        connections,
        [name for name in names if name in SERVER_MEMORY],
        connection_host(),
        open_rate_per_s=ramp.open_rate_per_s,
        ramp_step=max(1, connections // WS_BENCH_STEPS),
        ramp_hold_s=options.hold_s,
        addresses_per_host=4,
    )
    return plan_refusal(plan)

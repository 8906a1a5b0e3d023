"""`harness compare` / `harness run`: build the plan and run it with progress (the tables
printed after it: harness.outputs.console)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from drivers import DRIVER_RAMPS, driver_class, driver_classes
from harness.affinity import parse_cpu_list
from harness.cgroups.files import parse_size
from harness.frameworks import register_servers, select_frameworks, server_option_names
from harness.live.reporters import Reporters
from harness.profile import Profile, load_profile
from harness.run.plan import Plan, claim_run_dir, default_cpus
from harness.run_options import RunOptions
from harness.services.database import check_backend, default_backend
from model.errors import UserError
from model.figures import figure
from model.results import Case, Run, Step
from model.scenarios import get_scenario
from servers.contract import PROTOCOL_H1, SINKS, TLS_PROTOCOLS

if TYPE_CHECKING:
    from harness.fleet.client import FleetAccess
    from harness.live.session import LiveSession


class RichReporter:
    """A progress bar per case and per step, and a live console line every second."""

    def __init__(self, console: Console, cases_total: int) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[live]}"),
            console=console,
            # the live line changes once a second; redrawing more often only costs CPU
            refresh_per_second=1,
        )
        self.cases_task = self.progress.add_task("cases", total=cases_total, live="")
        self.steps_task = self.progress.add_task("steps", total=1, live="")
        self._offered = ""

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def preparing(self, *, what: str, done: int, total: int) -> None:
        """Before the first case: generating the file set, loading GridFS."""
        self.progress.update(
            self.steps_task, description=f"preparing {what}", total=total, completed=done
        )

    def case_started(self, *, label: str, steps: int) -> None:
        self.progress.reset(self.steps_task, total=steps, description=label, live="")

    def step_started(self, *, index: int, offered: float, unit: str) -> None:
        self._offered = f"offered {figure(offered)} {unit}"

    def sample(self, *, row: dict[str, Any]) -> None:
        # a server without telemetry (one run as a command) has no req/s or tick of its own
        served = row.get("requests_per_s")
        tick = row.get("tick_max_ms")
        live = " | ".join(
            part
            for part in (
                self._offered,
                f"{served:,.0f} req/s" if served is not None else "",
                f"server CPU {row['server_cpu_pct']:.0f}%",
                f"db CPU {row['db_cpu_pct']:.0f}%" if "db_cpu_pct" in row else "",
                f"tick max {tick:.0f} ms" if tick is not None else "",
            )
            if part
        )
        self.progress.update(self.steps_task, live=live)

    def step_finished(self, *, step: Step) -> None:
        self.progress.advance(self.steps_task)
        errors = step.errors["total"]
        achieved = f"{step.achieved:,.0f} " + ("held" if step.unit == "conns" else "req/s")
        self.progress.update(self.steps_task, live=f"{self._offered}: {achieved}, {errors} errors")

    def case_finished(self, *, case: Case) -> None:
        task = next(t for t in self.progress.tasks if t.id == self.cases_task)
        if task.total is not None and task.completed + 1 > task.total:  # rounds to a precision
            self.progress.update(self.cases_task, total=task.completed + 1)
        self.progress.advance(self.cases_task)


def build_plan(options: RunOptions) -> Plan:
    """Check every user choice up front (one-line errors), then fix the plan. Servers given
    as commands (`--server`, a servers file, the profile's [servers] table) are registered
    first, so that `options.frameworks` may name them.

    `options.mongo_backend` None: PostgreSQL when it is installed, else SQLite
    (harness.services.database.default_backend; `mongo_backend_note` says which and why).
    """
    overrides = options.profile_overrides()
    profile = load_profile(options.profile, overrides)
    register_servers(
        options.servers, options.servers_file, profile.servers, f"profile {profile.name}"
    )
    names = select_frameworks(options.frameworks, server_option_names(options.servers))
    needs_bodies = get_scenario(profile.scenario).check_body
    check_driver(profile, needs_bodies)
    notes: tuple[str, ...] = ()
    if overrides.get("driver") is None:  # the profile's choice, not the user's: adapt it
        profile, notes = speaking_driver(profile, needs_bodies)
    check_load(profile, options)
    server_cpus, load_cpus = placed_cpus(options)
    backend = check_backend(options.mongo_backend) if options.mongo_backend else None
    memory_max_bytes = check_limits(options.cpu_quota, options.memory_max)
    cpu_profile, profile_note = cpu_profile_choice(options.cpu_profile, profile)
    notes += (profile_note,) if profile_note else ()
    run_id, run_dir = claim_run_dir(options.results_dir, profile.name)
    return Plan(
        profile,
        tuple(names),
        server_cpus,
        load_cpus,
        run_dir,
        run_id,
        options.verify,
        options.mongo_url,
        strict_verify=options.strict_verify,
        mongo_backend=backend or default_backend()[0],
        db_cpus=options.db_cpus,
        fleet=options.fleet,
        fleet_access=options.fleet_access,
        server_address=options.server_address,
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        cpu_quota=options.cpu_quota,
        memory_max_bytes=memory_max_bytes,
        cpu_profile=cpu_profile,
        notes=notes,
    )


def cpu_profile_choice(asked: bool, profile: Profile) -> tuple[bool, str | None]:
    """Whether the run samples its servers (--cpu-profile), and the line that says how
    (a connection ramp has no peak load to hold a round at: nothing is sampled)."""
    from harness.run.profiled import CPU_PROFILE_NOTE
    from harness.run.rounds import ROUND_KINDS

    if not asked:
        return False, None
    if profile.ramp.kind not in ROUND_KINDS:
        return (
            False,
            f"--cpu-profile: a {profile.ramp.kind} ramp has no round at a peak; not sampled",
        )
    return True, f"--cpu-profile: {CPU_PROFILE_NOTE}"


def check_driver(profile: Profile, needs_bodies: bool) -> None:
    """The profile's sink and driver exist, the driver runs its ramp (and checks reply
    bodies where the scenario needs it); one line naming the fix otherwise."""
    if profile.sink not in SINKS:
        raise UserError(f"unknown sink {profile.sink}: choose from {', '.join(SINKS)}")
    if profile.driver not in DRIVER_RAMPS:
        raise UserError(f"unknown driver {profile.driver}: choose from {', '.join(DRIVER_RAMPS)}")
    if profile.ramp.kind not in DRIVER_RAMPS[profile.driver]:
        fits = [d for d, kinds in DRIVER_RAMPS.items() if profile.ramp.kind in kinds]
        raise UserError(
            f"driver {profile.driver} does not run {profile.ramp.kind} ramps "
            f"(profile {profile.name}): use --driver {' or '.join(fits)}"
        )
    if needs_bodies and not driver_class(profile.driver).checks_bodies:
        raise UserError(
            f"driver {profile.driver} does not check reply bodies, which the "
            f"{profile.scenario} scenario needs: use --driver wrk"
        )
    cannot = get_scenario(profile.scenario).needs - getattr(
        driver_class(profile.driver), "features", frozenset()
    )
    if cannot:  # pipelining, the scenario's headers: model.scenarios
        raise UserError(
            f"driver {profile.driver} cannot send what the {profile.scenario} scenario needs "
            f"({', '.join(sorted(cannot))}): use --driver wrk"
        )


def speaking_driver(profile: Profile, needs_bodies: bool) -> tuple[Profile, tuple[str, ...]]:
    """The profile with a driver that speaks its protocols (protocol_driver), and the
    note that says so when that is not the profile's own."""
    driver = protocol_driver(profile.protocols, profile.driver, profile.ramp.kind, needs_bodies)
    if driver == profile.driver:
        return profile, ()
    unspoken = [p for p in profile.protocols if p not in driver_class(profile.driver).protocols]
    note = (
        f"driver {driver}: the profile's {profile.driver} does not speak "
        f"{', '.join(unspoken)} (--driver chooses another)"
    )
    return dataclasses.replace(profile, driver=driver), (note,)


def check_load(profile: Profile, options: RunOptions) -> None:
    """The run's protocols against its driver, the fleet and a user's certificate
    (check_protocols); a fleet's own choices (check_fleet_plan)."""
    check_protocols(
        profile.protocols,
        profile.driver,
        options.fleet,
        options.tls_cert,
        options.tls_key,
        profile.ramp.kind,
    )
    if options.fleet is not None:
        check_fleet_plan(
            options.fleet, profile.driver, options.server_address, options.fleet_access
        )
    elif options.server_address is not None:
        raise UserError("--server-address is for --fleet runs (servers stay on loopback)")


def placed_cpus(options: RunOptions) -> tuple[str, str]:
    """The server's and the load's CPUs (the defaults where not given), each checked, and
    the database's: a database of the user's own (--mongo-url) is not the harness's to
    place."""
    default_server, default_load = default_cpus()
    server_cpus = options.server_cpus or default_server
    load_cpus = options.load_cpus or default_load
    for cpus in (server_cpus, load_cpus, options.db_cpus):
        if cpus is not None:
            parse_cpu_list(cpus)
    if options.mongo_url is not None and (
        options.mongo_backend is not None or options.db_cpus is not None
    ):
        raise UserError(
            "--mongo-backend and --db-cpus choose the database the harness starts; "
            "--mongo-url names your own"
        )
    return server_cpus, load_cpus


def check_limits(cpu_quota: float | None, memory_max: str | None) -> int | None:
    """--cpu-quota (cores, 0.01..1024) and --memory-max (`512M`: at least 1 MiB) checked;
    the memory limit in bytes (None: none)."""
    if cpu_quota is not None and not 0.01 <= cpu_quota <= 1024:
        raise UserError(f"--cpu-quota {cpu_quota:g} is not a number of cores in 0.01..1024")
    if memory_max is None:
        return None
    try:
        size = parse_size(memory_max)
    except ValueError as error:
        raise UserError(f"--memory-max: {error}") from None
    if size < 2**20:
        raise UserError(f"--memory-max {memory_max} is under 1 MiB: no server starts in that")
    return size


def protocol_driver(
    protocols: tuple[str, ...], driver: str, ramp_kind: str, needs_bodies: bool
) -> str:
    """`driver` when it speaks every protocol in `protocols`; else the first registered
    driver that does and runs `ramp_kind` ramps (checking bodies where the scenario needs
    it), so `--protocol h2` on a wrk profile runs on h2load; `driver` again when none does
    (check_protocols then says so in one line)."""
    if all(p in driver_class(driver).protocols for p in protocols):
        return driver
    able = drivers_speaking(protocols, ramp_kind, needs_bodies)
    return able[0] if able else driver


def drivers_speaking(
    protocols: tuple[str, ...], ramp_kind: str, needs_bodies: bool = False
) -> list[str]:
    """The registered drivers that speak every protocol in `protocols` and run `ramp_kind`
    ramps (and check reply bodies, when `needs_bodies`), in registry order."""
    return [
        name
        for name, cls in driver_classes().items()
        if all(p in cls.protocols for p in protocols)
        and ramp_kind in cls.ramp_kinds
        and (cls.checks_bodies or not needs_bodies)
    ]


def check_protocols(
    protocols: tuple[str, ...],
    driver: str,
    fleet: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    ramp_kind: str = "concurrency",
) -> None:
    """The run's protocols against its driver (one line naming the drivers that speak
    them and run its ramp), the fleet (cleartext h1 only) and a user's certificate (it
    must load)."""
    speaks = driver_class(driver).protocols
    unspoken = [p for p in protocols if p not in speaks]
    if unspoken:
        able = drivers_speaking(protocols, ramp_kind)
        instead = (
            f"use --driver {' or '.join(able)}"
            if able
            else f"no driver that runs {ramp_kind} ramps speaks {', '.join(protocols)}"
        )
        raise UserError(
            f"driver {driver} does not speak {', '.join(unspoken)} (it speaks "
            f"{', '.join(speaks)}): {instead}"
        )
    if fleet is not None and protocols != (PROTOCOL_H1,):
        raise UserError(f"--fleet runs cleartext h1 only, not {', '.join(protocols)}")
    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together (a certificate and its key)")
    if tls_cert is not None and tls_key is not None:
        if not any(p in TLS_PROTOCOLS for p in protocols):
            raise UserError(
                f"--tls-cert is for the TLS protocols ({', '.join(TLS_PROTOCOLS)}): "
                f"this run speaks {', '.join(protocols)}"
            )
        from harness.tls import user_certificates

        user_certificates(str(tls_cert), str(tls_key))


def mongo_backend_note(plan: Plan, asked: str | None) -> str | None:
    """A one-line note when the run needs a database and falls back to SQLite because
    PostgreSQL is not installed (None otherwise)."""
    scenario = get_scenario(plan.profile.scenario)
    uses_mongo = plan.profile.sink == "mongo" or scenario.backend == "gridfs"
    if not uses_mongo or plan.mongo_url is not None or asked is not None:
        return None
    return default_backend()[1]


# the drivers a fleet's hosts run (harness.fleet); mcload (memcached) runs here only
FLEET_DRIVERS = ("wrk", "httperf", "ab", "siege", "oha", "agent")


def check_fleet_plan(
    fleet: str, driver: str, server_address: str | None, access: FleetAccess | None = None
) -> None:
    """A --fleet run's choices, checked before anything starts (a tls:// fleet's
    certificate files too)."""
    from harness.fleet.client import FleetAccess, parse_fleet
    from harness.fleet.security import user_identity
    from harness.server_process import check_listen_address

    access = access or FleetAccess()
    spec = parse_fleet(fleet, access)
    if spec.scheduler is not None and not spec.insecure:
        user_identity(access.ca, access.cert, access.key)
    elif spec.local_hosts is not None and (access.ca or access.cert or access.key):
        raise UserError(
            "--fleet-ca/--fleet-cert/--fleet-key are for --fleet tls://: a "
            "local fleet has its own certificates"
        )
    if driver not in FLEET_DRIVERS:
        raise UserError(
            f"driver {driver} does not run on a fleet yet: use --driver "
            f"{' or '.join(FLEET_DRIVERS)}"
        )
    if server_address is not None:
        check_listen_address(server_address, "--server-address: a server")


def run_plan(plan: Plan, console: Console, live: LiveSession | None = None) -> tuple[Run, float]:
    """Run with progress bars (and the live page's and exporter's reporter beside them,
    with `live`); returns the run and its wall time in seconds."""
    # the runner (its verifiers, HTTP clients, statistics) loads here, not to plan
    from harness.run.loop import Runner
    from harness.run.rounds import has_rounds

    profile = plan.profile
    cases = len(profile.affinity_modes) * len(profile.process_models) * len(plan.frameworks)
    cases *= len(profile.protocols)
    # each confirmation round runs every case once more (fewer if a case found no peak;
    # with a precision, the minimum: more rounds grow the total as they start)
    cases_total = cases * (profile.repeat + (profile.rounds if has_rounds(profile) else 0))
    started = time.monotonic()
    try:
        runner = Runner(plan)
    except BaseException:  # nothing ran: leave no empty run directory behind
        with contextlib.suppress(OSError):
            plan.out_dir.rmdir()
        raise
    with RichReporter(console, cases_total) as reporter:
        runner.reporter = reporter
        if live is not None:
            runner.reporter = Reporters(reporter, *live.reporters(plan, cases_total))
        run = runner.run()
    return run, time.monotonic() - started

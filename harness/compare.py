"""`harness compare` / `harness run`: build the plan, run it with progress, print the summary."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from charts.tables import MEMORY_HEADERS, memory_rows
from drivers import DRIVER_RAMPS, driver_class, driver_classes
from harness.affinity import parse_cpu_list
from harness.cgroups.files import parse_size
from harness.frameworks import register_servers, select_frameworks
from harness.outputs.text import CLOSING_HEADERS, closing_rows
from harness.profile import Profile, load_profile
from harness.run import Plan, Runner, claim_run_dir, default_cpus
from harness.run.rounds import has_rounds
from harness.run_options import RunOptions
from harness.services.database import check_backend, default_backend
from model.errors import UserError
from model.figures import figure
from model.results import Case, Run, Step, has_protocol_axis
from model.scenarios import get_scenario
from servers.contract import PROTOCOL_H1, SINKS, TLS_PROTOCOLS

if TYPE_CHECKING:
    from harness.fleet.client import FleetAccess


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
    names = select_frameworks(options.frameworks)
    needs_bodies = get_scenario(profile.scenario).check_body
    check_driver(profile, needs_bodies)
    notes: tuple[str, ...] = ()
    if overrides.get("driver") is None:  # the profile's choice, not the user's: adapt it
        profile, notes = speaking_driver(profile, needs_bodies)
    check_load(profile, options)
    server_cpus, load_cpus = placed_cpus(options)
    backend = check_backend(options.mongo_backend) if options.mongo_backend else None
    memory_max_bytes = check_limits(options.cpu_quota, options.memory_max)
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
        notes=notes,
    )


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


def run_plan(plan: Plan, console: Console) -> tuple[Run, float]:
    """Run with progress bars; returns the run and its wall time in seconds."""
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
        run = runner.run()
    return run, time.monotonic() - started


def _fmt(value: float | None, pattern: str = "{:,.0f}") -> str:
    return pattern.format(value) if value is not None else "–"


def run_status_line(run: Run) -> str:
    """`complete`, `interrupted: stopped by SIGTERM`, `failed: <why>`; a run.json still
    `running` after its harness is gone was killed before it could say so."""
    if run.status == "running":
        return "running (or its harness was killed before it could write an end)"
    return f"{run.status}: {run.status_reason}" if run.status_reason else run.status


def _ci(pair: tuple[float, float] | None, spec: str = "{:,.0f}") -> str:
    """ " [low, high]" for a 95 % interval; "" when there is none."""
    return "" if pair is None else f" [{spec.format(pair[0])}, {spec.format(pair[1])}]"


LEFT_COLUMNS = ("framework", "flags", "process model", "protocol")


def summary_table(run: Run) -> Table:
    """framework, peak, ratio to nginx, p99 at peak, CPU, CPU µs per request, RSS, errors,
    flags — per case.

    A process-model column appears when the run compares several; a protocol column when
    it has more than one protocol or any but h1, and `TLS tax` (an h1-tls peak over the
    same server's h1 peak) when a server ran both; MB/s when the scenario moves files;
    `vs nginx` when nginx ran beside the others. With confirmation rounds, peak, ratios
    and p99 carry their 95 % intervals in brackets.
    """
    cases = run.cases
    models = len({c.process_model for c in cases}) > 1
    protocols = has_protocol_axis(cases)
    megabytes = any(c.summary.megabytes_per_s_at_peak is not None for c in cases)
    ratios = any(c.summary.ratio_to_nginx is not None for c in cases)
    taxes = any(c.summary.tls_tax is not None for c in cases)
    resumed = any("resumed_per_s" in s.extra for c in cases for s in c.steps)
    columns = ["framework", *(["process model"] if models else [])]
    columns += ["protocol"] if protocols else []
    columns += ["affinity", "status", "peak"]
    columns += ["vs nginx"] if ratios else []
    columns += ["TLS tax"] if taxes else []
    columns += ["resumed /s"] if resumed else []
    columns += ["MB/s"] if megabytes else []
    columns += ["at", "p99 at peak ms", "server CPU %"]
    columns += ["CPU µs/req"] if any(c.summary.cpu_us_per_req is not None for c in cases) else []
    columns += ["RSS MB", "errors", "flags"]
    table = Table(title=f"run {run.run_id}: {run_status_line(run)}")
    if any(c.summary.role == "baseline" for c in cases):
        table.caption = "* baseline"
    for column in columns:
        table.add_column(
            column,
            justify="left" if column in LEFT_COLUMNS else "right",
            overflow="fold",
        )
    for case in cases:
        summary = case.summary
        name = case.framework + ("*" if summary.role == "baseline" else "")
        cells = {
            "framework": name,
            "process model": case.process_model,
            "protocol": case.protocol,
            "affinity": case.affinity.get("mode") or "",
            "status": case.status_text,
        }
        if case.status != "ok":
            # whole: the table wraps it, never cuts it; brackets are text, not markup
            cells["flags"] = escape(case.error or "")
        else:
            rss = summary.rss_max_bytes
            unit = case.steps[0].unit if case.steps else ""
            at = summary.peak_offered
            ratio = summary.ratio_to_nginx
            cells |= {
                "peak": _fmt(summary.peak) + f" {summary.peak_unit}" + _ci(summary.peak_ci),
                "vs nginx": (f"{ratio:.2f}×" if ratio is not None else "–")
                + _ci(summary.ratio_to_nginx_ci, "{:.2f}"),
                "TLS tax": (f"{summary.tls_tax:.2f}×" if summary.tls_tax is not None else "")
                + _ci(summary.tls_tax_ci, "{:.2f}"),
                "MB/s": _fmt(summary.megabytes_per_s_at_peak, "{:.1f}"),
                "resumed /s": _fmt(resumed_at_peak(case)),
                "at": f"{figure(at)} {unit}" if at is not None else "–",
                "p99 at peak ms": _fmt(summary.p99_at_peak_ms, "{:.2f}")
                + _ci(summary.p99_at_peak_ci_ms, "{:.2f}"),
                "server CPU %": _fmt(summary.server_cpu_at_peak_pct),
                "CPU µs/req": _fmt(summary.cpu_us_per_req, "{:,.1f}")
                + _ci(summary.cpu_us_per_req_ci, "{:,.1f}")
                + (
                    f" ({summary.cpu_ratio_to_nginx:.2f}× nginx)"
                    if summary.cpu_ratio_to_nginx is not None
                    else ""
                ),
                "RSS MB": _fmt(rss / 1e6 if rss else None, "{:.1f}"),
                "errors": str(summary.errors_total),
                "flags": " ".join(
                    [*summary.flags, *([_warnings_text(case.warnings)] if case.warnings else [])]
                ),
            }
        table.add_row(*(cells.get(column, "") for column in columns))
    return table


def resumed_at_peak(case: Case) -> float | None:
    """The handshakes profile's resumed handshakes per second in the peak step (its
    figure is the full handshakes; drivers.handshakes, resumption "both")."""
    peak = next((s for s in case.steps if s.offered == case.summary.peak_offered), None)
    return peak.extra.get("resumed_per_s") if peak is not None else None


def _warnings_text(count: int) -> str:
    return f"{count} deviation{'s' if count > 1 else ''} (below)"


def deviation_lines(run: Run) -> list[str]:
    """Each case's undeclared deviations as whole lines, `framework: check key: sent …;
    expected …; came …; remedy` (harness.verify.severity), once per framework and key."""
    lines = []
    for case in run.cases:
        if case.status != "ok":  # measured only: a failed case says why in its error
            continue
        for deviation in case.deviations:
            if deviation.get("declared") is None:
                lines.append(f"{case.framework}: {deviation_line(deviation, case.framework)}")
    return list(dict.fromkeys(lines))


def deviation_line(deviation: dict[str, Any], server: str) -> str:
    """A deviation read back from run.json, as its one line."""
    from harness.verify.severity import deviation_from_dict

    return deviation_from_dict(deviation).line(server)


def topology_table(run: Run) -> Table | None:
    """The process-model study's table when a run compares process models: req/s, time per request,
    percentiles, and real failures apart from ab's Length artefacts (None otherwise)."""
    if len({c.process_model for c in run.cases}) < 2:
        return None
    table = Table(title="process models (the process-model study)")
    columns = ("framework", "process model", "req/s", "mean ms", "p50 ms", "p90 ms",
               "p99 ms", "max ms", "failed", "length artefacts")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:2] else "right")
    for case in run.cases:
        best = max(case.steps, key=lambda s: s.achieved, default=None)
        if case.status != "ok" or best is None:
            table.add_row(case.framework, case.process_model, case.status, *[""] * 6,
                          escape(case.error or ""))  # fmt: skip
            continue
        latency = best.latency_ms
        table.add_row(
            case.framework,
            case.process_model,
            _fmt(best.achieved),
            _fmt(latency.get("avg"), "{:.1f}"),
            _fmt(latency.get("p50"), "{:.1f}"),
            _fmt(latency.get("p90"), "{:.1f}"),
            _fmt(latency.get("p99"), "{:.1f}"),
            _fmt(latency.get("max"), "{:.1f}"),
            str(best.errors.get("total", 0)),
            str(best.extra.get("length_mismatches", 0)),
        )
    return table


def figure_text(value: float | None) -> str:
    """A figure of any size readably: 25,752 req/s; 3.72 ms; 0.153×."""
    if value is None:
        return "–"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def threshold_table(run: Run) -> Table | None:
    """Each threshold rule against each case it named: the figure, its interval, what was
    compared (the interval's low or high end, or the value) and whether it held; None when
    the run had no rules."""
    if not run.thresholds:
        return None
    failed = sum(not t.held for t in run.thresholds)
    table = Table(title=f"thresholds: {len(run.thresholds) - failed} held, {failed} failed")
    for column in ("rule", "case", "value", "interval", "judged on", "result"):
        table.add_column(column, justify="right" if column in ("value", "interval") else "left")
    for result in run.thresholds:
        interval = result.interval
        table.add_row(
            escape(result.rule),  # `aiohttp[h1-tls]: …` is a rule, not rich markup
            result.case,
            figure_text(result.value),
            f"[{figure_text(interval[0])}, {figure_text(interval[1])}]" if interval else "–",
            result.judged_on,
            "[green]held[/]" if result.held else "[red]FAILED[/]",
        )
    return table


def precision_table(run: Run) -> Table | None:
    """Each case measured in rounds: how many ran and counted, the half-width its peak
    reached (% of the peak) against the precision asked, the round length, and for an
    imprecise case where its noise came from; then each round kept out and why. None when
    no case ran rounds."""
    measured = [c for c in run.cases if c.status == "ok" and c.summary.rounds]
    if not measured:
        return None
    asked = {c.summary.precision_pct for c in measured} - {None}
    title = "precision" + (
        f": ±{', '.join(f'{p:g}' for p in sorted(asked))} % asked" if asked else ""
    )
    table = Table(title=title)
    columns = ("case", "rounds", "kept out", "round s", "± % of peak", "precision", "noise")
    for column in columns:
        table.add_column(
            column, justify="left" if column in ("case", "precision", "noise") else "right"
        )
    for case in measured:
        summary = case.summary
        parts = (case.framework, case.protocol, case.process_model, case.affinity.get("mode"))
        label = " ".join(part for part in parts if part)
        width = summary.half_width_pct
        if summary.precision_pct is None:
            state = "–"
        elif summary.imprecise_reason is not None:
            state = f"[yellow]imprecise[/]: {summary.imprecise_reason}"
        else:
            state = f"[green]within ±{summary.precision_pct:g} %[/]"
        table.add_row(
            label,
            str(summary.rounds),
            str(len(summary.rounds_excluded)),
            _fmt(summary.round_duration_s, "{:g}"),
            _fmt(width, "±{:.1f}"),
            state,
            summary.noise_note or "",
        )
    excluded = [
        f"{case.framework} round {e['round'] + 1}: {e['reason']}"
        for case in measured
        for e in case.summary.rounds_excluded
    ]
    if excluded:
        table.caption = "kept out — " + "; ".join(excluded)
    return table


def closing_table(run: Run) -> Table | None:
    """The close-storm table: each connection case's closing step (the server's worst tick
    while every connection closed at once); None when no case has one."""
    rows = closing_rows(list(run.cases))
    if not rows:
        return None
    table = Table(title="close storm: every connection closed at once at the ramp's end")
    for column in CLOSING_HEADERS:
        table.add_column(column, justify="left" if column in ("server", "close") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def memory_table(run: Run) -> Table | None:
    """The connection table: each connection case's top step, breaking point and memory
    per connection (server, agents, kernel, the whole host); None when no case has one."""
    rows = memory_rows(list(run.cases))
    if not rows:
        return None
    table = Table(title="connections: where each server stopped and where its memory went")
    for column in MEMORY_HEADERS:
        justify = "left" if column in ("server", "breaking point") else "right"
        table.add_column(column, justify=justify)
    for row in rows:
        table.add_row(*row)
    return table


def precision_line(run: Run) -> str | None:
    """One line on a run to a precision: how many cases reached it, and each that did not
    with its width and the source of its noise; None when no precision was asked."""
    asked = [c for c in run.cases if c.status == "ok" and c.summary.precision_pct is not None]
    if not asked:
        return None
    short = [c for c in asked if c.summary.imprecise_reason is not None]
    within = len(asked) - len(short)
    line = f"precision: {within} of {len(asked)} cases within the ±% asked"
    if short:
        line += "; imprecise: " + "; ".join(
            f"{c.framework} {c.summary.imprecise_reason}, noise from the {c.summary.noise_source}"
            for c in short
        )
    return line

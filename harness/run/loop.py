"""The loop over cases: the same ramp against every framework, `run.json` after each case.

A failing framework never stops the others; `run.json` and `steps.csv` are rewritten after
every case so an interrupted run keeps what it finished, and the run ends with a status:
complete, interrupted (Ctrl-C, SIGTERM, SIGHUP) or failed (any exception, with its
reason). `repeat` interleaves frameworks (A B C A B C …) and keeps the median of each
step, flagging steps whose repeats spread by more than 10 % as `noisy`. Protocols are
interleaved as process models are: every framework on one protocol, then on the next.

A run with a TLS protocol makes its certificates once (harness.tls: a throwaway CA in a
private temporary directory, removed when the run ends) unless the user gave their own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.affinity import harness_pinned
from harness.cgroups.groups import Cgroup, CgroupSupport, adopted, run_support
from harness.doctor import host_facts
from harness.lifecycle import interrupt_reason
from harness.run.case import run_case
from harness.run.context import RunContext
from harness.run.outputs import write_files_index, write_steps_csv
from harness.run.peak import combine_repeats
from harness.run.plan import Plan, Reporter, SilentReporter, now_iso
from harness.run.profiled import (
    CPU_PROFILE_NOTE,
    peaked_cases,
    run_profiled_round,
    with_profiles,
)
from harness.run.ratios import with_baseline_ratios, with_tls_tax
from harness.run.round_figures import with_rounds
from harness.run.rounds import has_rounds, run_rounds
from harness.run.verdict import verdict
from harness.secrets import redactor
from harness.services.backends import Backends
from harness.services.database import HarnessDatabase
from harness.services.ferretdb import own_database
from harness.tls import run_certificates
from harness.tools import TOOLS, tool_status
from model.errors import UserError
from model.results import (
    FLAG_MEANINGS,
    SCHEMA,
    Case,
    Run,
    RunStatus,
    run_from_dict,
    write_run,
)
from model.scenarios import get_scenario
from model.thresholds import judge_thresholds, parse_threshold
from servers import BUILTIN, FRAMEWORKS


@dataclass
class Runner:
    """Runs a plan: checks it can write and drive, then every case in turn."""

    plan: Plan
    reporter: Reporter = field(default_factory=SilentReporter)

    def __post_init__(self) -> None:
        driver = self.plan.profile.driver
        if TOOLS.get(driver) and tool_status(TOOLS[driver]).path is None:
            raise UserError(f"{driver} not found: run `harness doctor --install`")
        out_dir = self.plan.out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            probe = out_dir / ".writable"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            raise UserError(
                f"results directory {out_dir} is not writable ({error.strerror}): "
                "choose another with --results"
            ) from None
        self.started = now_iso()
        self.fleet_description: dict[str, Any] | None = None  # set once the fleet is open
        self.tls_description: dict[str, Any] | None = None  # set once certificates exist
        self.host = host_facts()
        self.versions = self._versions()
        # which cgroups the run may make, found once (one line on stderr when none)
        self.cgroups: CgroupSupport = run_support()
        self.database_cgroup: Cgroup | None = None  # the database's, once it runs in one
        if not self.cgroups.usable and (self.plan.cpu_quota or self.plan.memory_max_bytes):
            raise UserError(
                f"--cpu-quota and --memory-max need cgroups, and none can be made here "
                f"({self.cgroups.reason})"
            )

    def _versions(self) -> dict[str, Any]:
        tools = {
            name: tool_status(TOOLS[name]).version
            for name in (self.plan.profile.driver, "taskset")
            if name in TOOLS
        }
        return {
            "python": self.host["python"],
            "harness": _harness_version(),
            "frameworks": {name: FRAMEWORKS[name].versions() for name in self.plan.frameworks},
            "tools": tools,
        }

    def run(self) -> Run:
        """Every case (frameworks interleaved across repeats), then the confirmation rounds
        (interleaved, rotated); run.json after each. The harness itself runs on the load's
        CPUs meanwhile (harness.affinity.harness_pinned)."""
        profile = self.plan.profile
        started_s = time.monotonic()  # the precision's time budget counts from here
        roles = {name: info.role for name, info in FRAMEWORKS.items()}
        by_key: dict[tuple[str, str, str, str], list[Case]] = {}
        rounds: dict[tuple[str, str, str, str], list[tuple[int, Case]]] = {}
        profiles: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # --cpu-profile's
        cases: list[Case] = []

        def figures() -> list[Case]:
            combined = {key: combine_repeats(runs) for key, runs in by_key.items()}
            measured = [
                with_rounds(case, rounds.get(key, []), profile.precision_pct or None)
                for key, case in combined.items()
            ]
            return with_tls_tax(with_baseline_ratios(with_profiles(measured, profiles), roles))

        self.write(cases, finished=None, status="running")  # a run.json from the start
        try:
            with harness_pinned(self.plan.load_cpus), self._backends() as run_context:
                for repeat in range(profile.repeat):
                    for mode in profile.affinity_modes:
                        for model in profile.process_models:
                            for protocol in profile.protocols:
                                for framework in self.plan.frameworks:
                                    case = run_case(
                                        run_context, framework, mode, repeat, model, None, protocol
                                    )
                                    key = (framework, mode, model.name, protocol)
                                    by_key.setdefault(key, []).append(case)
                                    cases = figures()
                                    self.write(cases, finished=None, status="running")
                                    self.reporter.case_finished(case=case)
                if has_rounds(profile):
                    peaked = {
                        key: combine_repeats(runs)
                        for key, runs in by_key.items()
                        if combine_repeats(runs).summary.peak_offered is not None
                    }

                    def record(key: tuple[str, ...], index: int, measured: Case) -> None:
                        nonlocal cases
                        rounds.setdefault(key, []).append((index, measured))
                        cases = figures()
                        self.write(cases, finished=None, status="running")
                        self.reporter.case_finished(case=measured)

                    run_rounds(run_context, peaked, record, started_s=started_s)
                if self.plan.cpu_profile:
                    for key, case in peaked_cases(by_key).items():
                        profiles[key] = run_profiled_round(run_context, case)
                        cases = figures()
                        self.write(cases, finished=None, status="running")
        except KeyboardInterrupt as error:  # Ctrl-C, SIGTERM, SIGHUP (harness.lifecycle)
            self.write(cases, now_iso(), "interrupted", interrupt_reason(error))
            raise
        except BaseException as error:
            self.write(cases, now_iso(), "failed", failure_reason(error))
            raise
        return self.write(cases, now_iso(), "complete")

    @contextlib.contextmanager
    def _backends(self) -> Iterator[RunContext]:
        """The run's context, with the scenario's backends (file set, GridFS, memcached)
        and the database the mongo sink and GridFS use, prepared once for the whole run."""
        plan = self.plan
        scenario = get_scenario(plan.profile.scenario)
        uses_mongo = plan.profile.sink == "mongo" or scenario.backend == "gridfs"
        with contextlib.ExitStack() as stack:
            database: HarnessDatabase | None = None
            fleet = None
            certificates = stack.enter_context(
                run_certificates(plan.profile.protocols, plan.tls_cert, plan.tls_key)
            )
            if certificates is not None:
                own = certificates.ca_path is None
                self.tls_description = {
                    "certificate": str(plan.tls_cert) if own else "a throwaway CA's (trustme)",
                    "key_type": certificates.key_type,
                }
            if plan.fleet is not None:
                from harness.fleet.client import open_fleet

                fleet = stack.enter_context(
                    open_fleet(plan.fleet, plan.server_address, plan.fleet_access)
                )
                self.fleet_description = fleet.describe()
            if plan.mongo_url is not None and uses_mongo:  # a user's MongoDB
                stack.enter_context(own_database(plan.mongo_url, plan.mongo_db))
            elif uses_mongo:  # started here, from this (the main) thread: see spawn
                self.reporter.preparing(what=f"FerretDB on {plan.mongo_backend}", done=0, total=1)
                # the group first: removed after the database stopped (the stack unwinds)
                database_group = self._database_cgroup(stack)
                database = stack.enter_context(
                    HarnessDatabase(
                        plan.mongo_backend, durable=plan.profile.durable, cpus=plan.db_cpus
                    )
                )
                self.database_cgroup = adopted(database_group, database.pids())
            if scenario.backend is None:
                yield RunContext(
                    plan,
                    scenario,
                    self.reporter,
                    database=database,
                    fleet=fleet,
                    certificates=certificates,
                    cgroups=self.cgroups,
                    database_cgroup=self.database_cgroup,
                )
                return

            def progress(done: int, total: int) -> None:
                self.reporter.preparing(what=scenario.backend or "", done=done, total=total)

            backends = stack.enter_context(
                Backends.for_scenario(
                    scenario,
                    mongo_url=plan.mongo_url,
                    database=database,
                    mongo_db=plan.mongo_db,
                    file_count=plan.profile.file_count,
                    progress=progress,
                )
            )
            yield RunContext(
                plan,
                scenario,
                self.reporter,
                backends,
                database,
                fleet,
                certificates,
                self.cgroups,
                self.database_cgroup,
            )

    def _database_cgroup(self, stack: contextlib.ExitStack) -> Cgroup | None:
        """A group for the database the run starts, on its CPUs (--db-cpus), removed when
        `stack` unwinds (None: the run may make none)."""
        if not self.cgroups.usable:
            return None
        try:
            group = Cgroup.create(self.cgroups, "database", cpus=self.plan.db_cpus)
        except OSError:
            return None  # its CPU is then its process tree's, sampled (db_cpu_pct)
        stack.callback(group.remove)
        return group

    def write(
        self,
        cases: Sequence[Case],
        finished: str | None,
        status: RunStatus,
        reason: str | None = None,
    ) -> Run:
        """run.json and steps.csv as they stand (each atomically), the profile's thresholds
        judged against the cases so far."""
        config = {
            "profile": self.plan.profile.to_dict(),
            "frameworks": list(self.plan.frameworks),
            # servers not builtin: where each came from, and a command's command line
            "servers": {
                name: {"origin": f.origin, "kind": f.kind, "command": f.command}
                for name in self.plan.frameworks
                if (f := FRAMEWORKS[name]).origin != BUILTIN
            },
            "server_cpus": self.plan.server_cpus,
            "agent_cpus": self.plan.load_cpus,
            "db_cpus": self.plan.db_cpus,
            "mongo_backend": None if self.plan.mongo_url else self.plan.mongo_backend,
            "cgroups": self.cgroups.describe(),
            # the group the run's database ran in (None: none started, or no cgroups)
            "database_cgroup": self.database_cgroup.name if self.database_cgroup else None,
            "cpu_quota": self.plan.cpu_quota,
            "cpu_profile": CPU_PROFILE_NOTE if self.plan.cpu_profile else None,
            "memory_max_bytes": self.plan.memory_max_bytes,
            "flags": FLAG_MEANINGS,
        }
        if self.fleet_description is not None:
            config["fleet"] = self.fleet_description
        if self.tls_description is not None:
            config["tls"] = self.tls_description
        run = redacted(Run(
            self.plan.run_id,
            self.started,
            finished,
            self.host,
            self.versions,
            config,
            tuple(cases),
            SCHEMA,
            status,
            reason,
            verdict(cases),
            judge_thresholds([parse_threshold(r) for r in self.plan.profile.thresholds], cases),
        ))  # fmt: skip
        write_run(run, self.plan.out_dir)
        write_steps_csv(run, self.plan.out_dir / "steps.csv")
        write_files_index(run, self.plan.out_dir)
        return run


def redacted(run: Run) -> Run:
    """`run` with every secret the harness knows hidden (harness.secrets): what run.json,
    steps.csv, FILES.md and the report are written from."""
    if redactor().hides_nothing:
        return run
    return run_from_dict(redactor().value(run.to_dict()))


def failure_reason(error: BaseException) -> str:
    """What run.json says about an exception that ended the run."""
    if isinstance(error, UserError):
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _harness_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("serverbench-harness")
    except PackageNotFoundError:
        return "unknown"

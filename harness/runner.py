"""The runner: the same ramp against every framework, one case at a time.

For each case: start the server pinned, verify it, warm up, run every step with the
monitor and the probe watching, stop it, record the case (`ok`, `failed` with the reason,
`skipped` when the framework is not installed). A failing framework never stops the
others; `run.json` is rewritten after every case so an interrupted run keeps what it
finished. `repeat` interleaves frameworks (A B C A B C …) and keeps the median of each
step, flagging steps whose repeats spread by more than 10 % as `noisy`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from drivers import make_driver
from drivers.base import Driver, DriverOutputError, DriverResult, Target, run_step
from harness import affinity as cpu_affinity
from harness.backends import Backends
from harness.connections import memory_per_connection, run_connection_ramp
from harness.doctor import TOOLS, host_facts, tool_status
from harness.monitor import Monitor, step_stats
from harness.probe import Probe
from harness.profile import Profile
from harness.sink_store import SinkStore
from harness.topology import ProcessModel, Topology, start_topology
from harness.verify import check_text_route, checks_for, run_checks
from model.errors import UserError
from model.ramps import ConnectionRamp, RampStep, RateRamp
from model.results import FLAG_MEANINGS, SCHEMA, Case, Run, Step, write_run
from model.scenarios import Scenario, get_scenario
from servers import FRAMEWORKS

DRIVER_BOUND_CPU_FRACTION = 0.90
NOISY_SPREAD = 0.10
RATE_ACHIEVED_FRACTION = 0.95  # autobench: a step holds when it achieved 95 % of the demand
INTERRUPTED_STOP_S = 2.0


class Reporter(Protocol):
    """What the runner tells whoever watches (the CLI's progress bars; nothing in tests)."""

    def preparing(self, *, what: str, done: int, total: int) -> None: ...
    def case_started(self, *, label: str, steps: int) -> None: ...
    def step_started(self, *, index: int, offered: float, unit: str) -> None: ...
    def sample(self, *, row: dict[str, Any]) -> None: ...
    def step_finished(self, *, step: Step) -> None: ...
    def case_finished(self, *, case: Case) -> None: ...


class SilentReporter:
    def preparing(self, *, what: str, done: int, total: int) -> None: ...
    def case_started(self, *, label: str, steps: int) -> None: ...
    def step_started(self, *, index: int, offered: float, unit: str) -> None: ...
    def sample(self, *, row: dict[str, Any]) -> None: ...
    def step_finished(self, *, step: Step) -> None: ...
    def case_finished(self, *, case: Case) -> None: ...


@dataclass(frozen=True)
class Plan:
    """A comparison to run: the profile, the frameworks and where load and servers run."""

    profile: Profile
    frameworks: tuple[str, ...]
    server_cpus: str
    agent_cpus: str
    out_dir: Path
    run_id: str
    verify: bool = True
    mongo_url: str | None = None  # a real MongoDB instead of the FerretDB the harness starts


def default_cpus() -> tuple[str, str]:
    """Server on the first CPU, load on the rest (both on it on a one-CPU machine)."""
    cpus = sorted(os.sched_getaffinity(0))
    server = [cpus[0]]
    agent = cpus[1:] or cpus[:1]
    return cpu_affinity.format_cpu_list(server), cpu_affinity.format_cpu_list(agent)


def new_run_id(profile_name: str) -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + profile_name


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- one step ----------------------------------------------------------------------------
def is_driver_bound(
    driver: Driver,
    result: DriverResult,
    step: RampStep,
    agent_cpu_pct: float | None,
    agent_cpu_count: int,
    calls_per_connection: int,
) -> bool:
    """The load generator, not the server, limited the step."""
    if driver.busy_polls:
        asked = step.offered / calls_per_connection
        offered = result.extra.get("connection_rate_per_s")
        return offered is not None and offered < RATE_ACHIEVED_FRACTION * asked
    if agent_cpu_pct is None:
        return False
    return agent_cpu_pct >= DRIVER_BOUND_CPU_FRACTION * 100.0 * agent_cpu_count


def build_step(
    ramp_step: RampStep,
    result: DriverResult,
    stats: dict[str, Any],
    probe_ms: float | None,
    flags: list[str],
    extra: dict[str, Any],
) -> Step:
    total = result.errors_total
    attempts = result.replies + total
    errors = {"total": total, **{kind: n for kind, n in result.errors.items() if n}}
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=round(result.rate, 1),
        replies=result.replies,
        errors=errors,
        error_rate=round(total / attempts, 6) if attempts else 0.0,
        latency_ms={
            k: (round(v, 3) if v is not None else None) for k, v in result.latency_ms.items()
        },
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        probe_ms=probe_ms,
        flags=tuple(flags),
        extra={**result.extra, "duration_s": round(result.duration_s, 3), **extra},
    )


def failed_step(ramp_step: RampStep, reason: str, stats: dict[str, Any]) -> Step:
    """A step whose driver produced no result (it aborted: refused, timed out)."""
    return Step(
        offered=ramp_step.offered,
        unit=ramp_step.unit,
        achieved=0.0,
        replies=0,
        errors={"total": 1, "aborted": 1},
        error_rate=1.0,
        latency_ms=dict.fromkeys(("avg", "p50", "p90", "p99", "max")),
        server_cpu_pct=stats["server_cpu_pct"],
        agent_cpu_pct=stats["agent_cpu_pct"],
        rss_max_bytes=stats["rss_max_bytes"],
        tick_ms=stats["tick_ms"],
        extra={"driver_error": reason},
    )


# -- summaries -----------------------------------------------------------------------------
def summarize(steps: tuple[Step, ...]) -> dict[str, Any]:
    """The peak (autobench's reading for rate ramps: the highest offered step with no errors
    that achieved ≥ 95 % of it; for concurrency: the best error-free req/s) and its context."""
    if not steps:
        return {"peak": None}
    clean = [s for s in steps if s.errors["total"] == 0]
    if steps[0].unit == "req/s":
        clean = [s for s in clean if s.achieved >= RATE_ACHIEVED_FRACTION * s.offered]
        best = max(clean, key=lambda s: s.offered, default=None)
        peak = best.offered if best else None
    else:
        best = max(clean, key=lambda s: s.achieved, default=None)
        peak = best.achieved if best else None
    flags = sorted({flag for s in steps for flag in s.flags})
    rss = [s.rss_max_bytes for s in steps if s.rss_max_bytes is not None]
    return {
        "peak": peak,
        "peak_unit": "req/s",
        "peak_offered": best.offered if best else None,
        "p99_at_peak_ms": best.latency_ms.get("p99") if best else None,
        "megabytes_per_s_at_peak": best.extra.get("megabytes_per_s") if best else None,
        "avg_latency_at_peak_ms": best.latency_ms.get("avg") if best else None,
        "server_cpu_at_peak_pct": best.server_cpu_pct if best else None,
        "rss_max_bytes": max(rss) if rss else None,
        "errors_total": sum(s.errors["total"] for s in steps),
        "flags": flags,
    }


def combine_repeats(cases: list[Case]) -> Case:
    """Several runs of one case as one: each step is the median run (by achieved)."""
    ok = [c for c in cases if c.status == "ok"]
    if len(cases) == 1 or not ok:
        return cases[0]
    steps = []
    for index in range(min(len(c.steps) for c in ok)):
        runs = sorted((c.steps[index] for c in ok), key=lambda s: s.achieved)
        median_step = runs[(len(runs) - 1) // 2]
        achieved = [s.achieved for s in runs]
        middle = statistics.median(achieved)
        spread = (max(achieved) - min(achieved)) / middle if middle else 0.0
        flags = set(median_step.flags)
        if spread > NOISY_SPREAD:
            flags.add("noisy")
        steps.append(
            dataclasses.replace(
                median_step,
                achieved=round(middle, 1),
                flags=tuple(sorted(flags)),
                extra={
                    **median_step.extra,
                    "repeats": len(runs),
                    "achieved_runs": achieved,
                    "spread": round(spread, 4),
                },
            )
        )
    failures = [c.error for c in cases if c.status != "ok"]
    first = ok[0]
    summary = {**summarize(tuple(steps)), "repeats": len(cases), "failed_repeats": failures}
    return dataclasses.replace(first, steps=tuple(steps), summary=summary)


def with_baseline_ratios(cases: list[Case]) -> list[Case]:
    """Each case's role, and its peak as a ratio to nginx's peak in the same run (seed 002:
    on noisy machines the ratio to a baseline measured alongside is the figure that travels).

    nginx is matched on scenario, sink, driver, affinity mode and process model, falling back
    to nginx's case with the same scenario and mode under any process model.
    """
    nginx = [c for c in cases if c.framework == "nginx" and c.status == "ok"]

    def nginx_peak(case: Case) -> float | None:
        same = [
            c
            for c in nginx
            if (c.scenario, c.sink, c.driver, c.affinity.get("mode"))
            == (case.scenario, case.sink, case.driver, case.affinity.get("mode"))
        ]
        exact = [c for c in same if c.process_model == case.process_model]
        chosen = (exact or same or [None])[0]
        return chosen.summary.get("peak") if chosen is not None else None

    result = []
    for case in cases:
        info = FRAMEWORKS.get(case.framework)
        summary = {**case.summary, "role": info.role if info else "framework"}
        peak, baseline = summary.get("peak"), nginx_peak(case)
        if peak is not None and baseline and summary.get("peak_unit", "req/s") == "req/s":
            summary["ratio_to_nginx"] = round(float(peak) / float(baseline), 3)
        result.append(dataclasses.replace(case, summary=summary))
    return result


# -- nothing lost ------------------------------------------------------------------------------
class Ledger:
    """What the sink held before the counted load, and the reconciliation after it."""

    FLUSH_WAIT_S = 0.3  # the file sink writes at least every 100 ms

    def __init__(self, store: SinkStore) -> None:
        self.store = store
        self.baseline: int | None = None
        self.websocket_messages_sent: int | None = None

    def mark_baseline(self) -> None:
        if self.store.sink != "empty":
            time.sleep(self.FLUSH_WAIT_S)
            self.baseline = self.store.count()

    def reconcile(self, case: Case, scenario: Scenario) -> Case:
        """After the server stopped (and flushed): sent vs stored; the difference is lost."""
        if self.baseline is None or case.status != "ok" or not scenario.stores_records:
            return case
        stored = (self.store.count() or 0) - self.baseline
        if scenario.websocket:
            sent = self.websocket_messages_sent or 0
        else:
            sent = sum(step.replies for step in case.steps)
        reconcile = {"sent": sent, "stored": stored, "lost": max(0, sent - stored)}
        if stored > sent:  # stored, but the client saw no reply (it timed out first)
            reconcile["stored_unacknowledged"] = stored - sent
        summary = {**case.summary, "sink_store": self.store.describe()}
        case = dataclasses.replace(case, reconcile=reconcile, summary=summary)
        acknowledged = self.store.sink == "file" or self.store.mongo_w == 1
        if reconcile["lost"] and acknowledged:  # w: 0 may lose writes by design; 1 may not
            return dataclasses.replace(
                case,
                status="failed",
                error=f"lost {reconcile['lost']} of {sent} acknowledged records in the "
                f"{self.store.sink} sink",
            )
        return case


# -- the runner ------------------------------------------------------------------------------
@dataclass
class Runner:
    plan: Plan
    reporter: Reporter = field(default_factory=SilentReporter)
    cases: list[Case] = field(default_factory=list)
    started: str = field(default_factory=_now_iso)

    def __post_init__(self) -> None:
        profile = self.plan.profile
        self.scenario = get_scenario(profile.scenario)
        self.models = profile.process_models
        self._model = self.models[0]  # the process model of the case being run
        self.backends: Backends | None = None
        self.calls_per_connection = (
            profile.ramp.calls_per_connection if isinstance(profile.ramp, RateRamp) else 1
        )
        self.timeout_s = (
            profile.ramp.timeout_s if isinstance(profile.ramp, RateRamp) else profile.timeout_s
        )
        if TOOLS.get(profile.driver) and tool_status(TOOLS[profile.driver]).path is None:
            raise UserError(f"{profile.driver} not found: run `harness doctor --install`")
        try:
            self.plan.out_dir.mkdir(parents=True, exist_ok=True)
            probe = self.plan.out_dir / ".writable"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            raise UserError(
                f"results directory {self.plan.out_dir} is not writable ({error.strerror}): "
                "choose another with --out"
            ) from None
        self.host = host_facts()
        self.versions = self._versions()

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

    # -- orchestration ---------------------------------------------------------------
    def run(self) -> Run:
        """Every case (frameworks interleaved across repeats); run.json after each."""
        profile = self.plan.profile
        by_key: dict[tuple[str, str, str], list[Case]] = {}
        try:
            with self._start_backends():
                for repeat in range(profile.repeat):
                    for mode in profile.affinity_modes:
                        for model in self.models:
                            for framework in self.plan.frameworks:
                                case = self.run_case(framework, mode, repeat, model)
                                key = (framework, mode, model.name)
                                by_key.setdefault(key, []).append(case)
                                self.cases = with_baseline_ratios(
                                    [combine_repeats(c) for c in by_key.values()]
                                )
                                self.write(finished=None)
                                self.reporter.case_finished(case=case)
        except KeyboardInterrupt:
            self.write(finished=_now_iso(), interrupted=True)
            raise
        return self.write(finished=_now_iso())

    @contextlib.contextmanager
    def _start_backends(self):  # type: ignore[no-untyped-def]
        """The scenario's backends (file set, GridFS, memcached), once for the whole run."""
        if self.scenario.backend is None:
            yield None
            return

        def progress(done: int, total: int) -> None:
            self.reporter.preparing(what=self.scenario.backend or "", done=done, total=total)

        with Backends.for_scenario(
            self.scenario,
            mongo_url=self.plan.mongo_url,
            file_count=self.plan.profile.file_count,
            progress=progress,
        ) as backends:
            self.backends = backends
            try:
                yield backends
            finally:
                self.backends = None

    def write(self, finished: str | None, interrupted: bool = False) -> Run:
        config = {
            "profile": self.plan.profile.to_dict(),
            "frameworks": list(self.plan.frameworks),
            "server_cpus": self.plan.server_cpus,
            "agent_cpus": self.plan.agent_cpus,
            "flags": FLAG_MEANINGS,
            "interrupted": interrupted,
        }
        run = Run(
            self.plan.run_id,
            self.started,
            finished,
            self.host,
            self.versions,
            config,
            tuple(self.cases),
            SCHEMA,
        )
        write_run(run, self.plan.out_dir)
        write_steps_csv(run, self.plan.out_dir / "steps.csv")
        return run

    def _case(self, framework: str, mode: str, status: str, **fields: Any) -> Case:
        profile = self.plan.profile
        model = fields.pop("model", None) or self._model
        return Case(
            framework=framework,
            scenario=profile.scenario,
            sink=profile.sink,
            driver=profile.driver,
            process_model=model.name,
            affinity=fields.pop("affinity", {"mode": mode, "server": None, "agent": None}),
            status=status,
            **fields,  # type: ignore[arg-type]
        )

    def run_case(
        self, framework: str, mode: str, repeat: int, model: ProcessModel | None = None
    ) -> Case:
        """One framework through the whole ramp; never raises for the framework's faults."""
        profile = self.plan.profile
        model = self._model = model or self.models[0]
        label = f"{framework} [{mode}]" + (f" #{repeat + 1}" if profile.repeat > 1 else "")
        if len(self.models) > 1:
            label += f" {model.name}"
        steps = list(profile.ramp)
        self.reporter.case_started(label=label, steps=len(steps))
        missing = FRAMEWORKS[framework].missing()
        if missing:
            return self._case(
                framework, mode, "skipped", error=f"not installed: {', '.join(missing)}"
            )
        server_cpus = self.plan.server_cpus if mode in ("both", "server") else None
        agent_cpus = self.plan.agent_cpus if mode in ("both", "agent") else None
        agent_count = (
            len(cpu_affinity.parse_cpu_list(agent_cpus)) if agent_cpus else (os.cpu_count() or 1)
        )
        affinity: dict[str, str | None] = {"mode": mode, "server": None, "agent": None}
        name = self._case(framework, mode, "ok").key + (
            f"_r{repeat + 1}" if profile.repeat > 1 else ""
        )
        case_dir = self.plan.out_dir / name
        if not FRAMEWORKS[framework].serves(self.scenario.route):
            return self._case(
                framework,
                mode,
                "skipped",
                affinity=affinity,
                error=f"not supported: {framework} does not serve {self.scenario.route}",
            )
        if profile.sink not in FRAMEWORKS[framework].sinks:
            return self._case(
                framework,
                mode,
                "skipped",
                affinity=affinity,
                error=f"not supported: {framework} has no {profile.sink} sink",
            )
        # GridFS and the mongo sink share one database when both are asked for
        mongo_url = self.plan.mongo_url or (self.backends.mongo_url if self.backends else None)
        try:
            store = SinkStore(profile.sink, mongo_url=mongo_url, mongo_w=profile.mongo_w)
        except UserError as error:
            return self._case(framework, mode, "failed", error=str(error), affinity=affinity)
        with store:
            ledger = Ledger(store)
            case = self._run_case_with_sink(
                framework,
                mode,
                steps,
                server_cpus,
                agent_cpus,
                agent_count,
                affinity,
                case_dir,
                store,
                ledger,
            )
            return ledger.reconcile(case, self.scenario)

    def _run_case_with_sink(
        self,
        framework: str,
        mode: str,
        steps: list[RampStep],
        server_cpus: str | None,
        agent_cpus: str | None,
        agent_count: int,
        affinity: dict[str, str | None],
        case_dir: Path,
        store: SinkStore,
        ledger: Ledger,
    ) -> Case:
        profile = self.plan.profile
        sink_args = store.server_args()
        backend_args = self.backends.server_args(sink_args) if self.backends else []
        try:
            server = start_topology(
                framework,
                self._model,
                sink=profile.sink,
                # a loop choice applies where the framework offers it (aiohttp, tornado)
                loop=profile.loop if profile.loop in FRAMEWORKS[framework].loops else None,
                server_cpus=server_cpus,
                extra_args=[*sink_args, *backend_args],
            )
        except UserError as error:
            return self._case(framework, mode, "failed", error=str(error), affinity=affinity)
        interrupted = False
        monitor = Monitor(
            server.latest_telemetry, on_sample=lambda row: self.reporter.sample(row=row)
        )
        try:
            affinity["server"] = cpu_affinity.cpus_allowed(server.pid)
            verify: dict[str, Any] = {}
            if self.plan.verify:
                # the contract on the (first) instance itself; behind a balancer, also that
                # the balancer passes GET / through (per-instance counters and proxied
                # WebSocket closes are not the contract's to judge through nginx)
                checks = run_checks(server.instance_url, checks_for(framework))
                if server.balancer is not None:
                    checks += run_checks(server.url, {"balancer": check_text_route})
                verify = {c.name: {"ok": c.ok, "detail": c.detail} for c in checks}
                failed = [c.name for c in checks if not c.ok]
                if failed:
                    details = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
                    return self._case(
                        framework,
                        mode,
                        "failed",
                        error=f"verify failed: {details}",
                        verify=verify,
                        affinity=affinity,
                    )
            monitor.start(server.pids)
            if isinstance(profile.ramp, ConnectionRamp):
                return self._run_connection_case(
                    framework,
                    mode,
                    profile.ramp,
                    server,
                    monitor,
                    agent_cpus,
                    case_dir,
                    affinity,
                    verify,
                    ledger,
                )
            driver = make_driver(
                profile.driver,
                agent_cpu_count=agent_count,
                calls_per_connection=self.calls_per_connection,
                requests_per_step=profile.requests_per_step,
            )
            target = Target(
                "127.0.0.1",
                server.mc_port() if self.scenario.protocol == "memcached" else server.port,
                self.scenario,
                self.timeout_s,
                paths=self.backends.paths(self.scenario) if self.backends else (),
                expected_body=self.backends.expected_body(self.scenario) if self.backends else None,
            )
            raw_dir = case_dir / "raw"

            def note_agent(pids: list[int]) -> None:
                monitor.set_agent_pids(pids)
                if affinity["agent"] is None and pids:
                    time.sleep(0.05)  # taskset has exec'd the driver by now
                    affinity["agent"] = cpu_affinity.cpus_allowed(pids[0])

            if profile.warmup_s > 0:
                warm = warmup_step(steps[0], profile.warmup_s)
                # a warm-up that fails says nothing the counted steps will not say
                with contextlib.suppress(DriverOutputError):
                    run_step(driver, warm, target, agent_cpus, raw_dir, "warmup")
            ledger.mark_baseline()  # what warm-up and verify stored is not counted
            recorded: list[Step] = []
            for ramp_step in steps:
                recorded.append(
                    self._run_one_step(
                        driver,
                        ramp_step,
                        target,
                        agent_cpus,
                        agent_count,
                        raw_dir,
                        monitor,
                        server,
                        note_agent,
                    )
                )
                self.reporter.step_finished(step=recorded[-1])
                if server.process.poll() is not None:
                    return self._case(
                        framework,
                        mode,
                        "failed",
                        affinity=affinity,
                        verify=verify,
                        steps=tuple(recorded),
                        summary=summarize(tuple(recorded)),
                        error=f"server exited (status {server.process.returncode}) during step "
                        f"{ramp_step.index}: {server.stderr_tail()}",
                    )
                if profile.cooldown_s:
                    time.sleep(profile.cooldown_s)
            summary = summarize(tuple(recorded))
            summary["topology"] = server.describe()
            if self.backends is not None:
                summary["backends"] = self.backends.describe()
                note = self.backends.limit_note()
                if note:
                    summary["limit_note"] = note
            return self._case(
                framework,
                mode,
                "ok",
                affinity=affinity,
                verify=verify,
                steps=tuple(recorded),
                summary=summary,
            )
        except KeyboardInterrupt:
            interrupted = True
            raise
        finally:
            monitor.stop()
            monitor.write_csv(case_dir / "monitor.csv")
            if interrupted:
                server.stop(INTERRUPTED_STOP_S)
            else:
                server.stop()

    def _run_connection_case(
        self,
        framework: str,
        mode: str,
        ramp: ConnectionRamp,
        server: Topology,
        monitor: Monitor,
        agent_cpus: str | None,
        case_dir: Path,
        affinity: dict[str, str | None],
        verify: dict[str, Any],
        ledger: Ledger,
    ) -> Case:
        """A connection ramp: agents hold connections across steps (harness.connections)."""
        ledger.mark_baseline()
        time.sleep(1.5)  # one idle monitor row: the server's RSS before any connection
        baseline_rss = monitor.rows[-1]["server_rss_bytes"] if monitor.rows else None
        result = run_connection_ramp(
            ramp=ramp,
            scenario=self.scenario,
            server=server,
            monitor=monitor,
            agent_cpus=agent_cpus,
            raw_dir=case_dir / "raw",
            server_workers=server.workers,
            baseline_rss_bytes=baseline_rss,
            on_step=lambda index, offered: self.reporter.step_started(
                index=index, offered=offered, unit="conns"
            ),
            on_step_done=lambda step: self.reporter.step_finished(step=step),
        )
        if agent_cpus is not None:
            affinity["agent"] = agent_cpus
        ledger.websocket_messages_sent = result.messages_sent
        steps = tuple(result.steps)
        clean = [s for s in steps if not s.extra.get("errors_in_step")]
        summary = {
            **summarize(steps),
            "peak": max((s.achieved for s in clean), default=None),
            "peak_unit": "conns",
            "breaking_point": result.breaking_point,
            "memory_per_connection_bytes": memory_per_connection(list(steps), baseline_rss),
            "baseline_rss_bytes": baseline_rss,
            "limits": result.limits,
        }
        breaking = result.breaking_point
        if breaking and breaking["connections"] >= 0.98 * result.limits["server_sockets_max"]:
            breaking["capped_by"] = (
                "the server processes' open-file limit, not the server: "
                "use --process-model workers:N"
            )
        if ramp.target > result.limits["server_sockets_max"]:
            summary["limit_note"] = (
                f"{ramp.target} connections exceed what {server.workers} server process(es) may "
                f"open ({result.limits['server_sockets_max']}): use --process-model workers:N"
            )
        if result.server_exit is not None:
            return self._case(
                framework,
                mode,
                "failed",
                affinity=affinity,
                verify=verify,
                steps=steps,
                summary=summary,
                error=f"server exited (status {result.server_exit}) at "
                f"{steps[-1].extra['open'] if steps else 0} connections: {server.stderr_tail()}",
            )
        if not steps:
            return self._case(
                framework,
                mode,
                "failed",
                affinity=affinity,
                verify=verify,
                error="the agents held no step: see raw/agent-*.txt",
            )
        return self._case(
            framework, mode, "ok", affinity=affinity, verify=verify, steps=steps, summary=summary
        )

    def _run_one_step(
        self,
        driver: Driver,
        ramp_step: RampStep,
        target: Target,
        agent_cpus: str | None,
        agent_count: int,
        raw_dir: Path,
        monitor: Monitor,
        server: Topology,
        note_agent: Callable[[list[int]], None],
    ) -> Step:
        self.reporter.step_started(
            index=ramp_step.index, offered=ramp_step.offered, unit=ramp_step.unit
        )
        probe = Probe(server.url, self.plan.profile.probe_interval_s)
        monitor.begin_step(ramp_step.index)
        probe.start()
        try:
            result: DriverResult | None = run_step(
                driver,
                ramp_step,
                target,
                agent_cpus,
                raw_dir,
                f"step{ramp_step.index:03d}",
                on_start=note_agent,
            )
            reason = ""
        except DriverOutputError as error:
            result, reason = None, str(error)
        finally:
            probe_ms = probe.stop()
            window = monitor.end_step()
        stats = step_stats(monitor.rows, server.telemetry_lines(), window)
        if result is None:
            return failed_step(ramp_step, reason, stats)
        flags = []
        if is_driver_bound(
            driver,
            result,
            ramp_step,
            stats["agent_cpu_pct"],
            agent_count,
            self.calls_per_connection,
        ):
            flags.append("driver_bound")
        if result.driver_errors:
            flags.append("driver_capped")
        extra = {"probe_failures": probe.failures, "driver_cpu_pct": result.driver_cpu_pct}
        return build_step(ramp_step, result, stats, probe_ms, flags, extra)


def warmup_step(first: RampStep, warmup_s: float) -> RampStep:
    """The first step's load for `warmup_s` (not recorded): caches, JITs, pools settle."""
    connections = None
    if first.connections is not None and first.duration_s:
        connections = max(1, round(first.connections * warmup_s / first.duration_s))
    return dataclasses.replace(first, index=-1, duration_s=warmup_s, connections=connections)


STEPS_CSV_COLUMNS = (
    "framework",
    "scenario",
    "sink",
    "driver",
    "process_model",
    "affinity",
    "status",
    "step",
    "offered",
    "unit",
    "achieved",
    "replies",
    "errors_total",
    "error_rate",
    "latency_avg_ms",
    "latency_p50_ms",
    "latency_p90_ms",
    "latency_p99_ms",
    "latency_max_ms",
    "server_cpu_pct",
    "agent_cpu_pct",
    "rss_max_bytes",
    "tick_avg_ms",
    "tick_max_ms",
    "probe_ms",
    "flags",
)


def write_steps_csv(run: Run, path: Path) -> None:
    """One row per case and step, autobench-like, for spreadsheets."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(STEPS_CSV_COLUMNS)
        for case in run.cases:
            head = [
                case.framework,
                case.scenario,
                case.sink,
                case.driver,
                case.process_model,
                case.affinity.get("mode"),
                case.status,
            ]
            if not case.steps:
                writer.writerow(head + [""] * (len(STEPS_CSV_COLUMNS) - len(head)))
            for index, step in enumerate(case.steps):
                latency = step.latency_ms
                writer.writerow(
                    [
                        *head,
                        index,
                        step.offered,
                        step.unit,
                        step.achieved,
                        step.replies,
                        step.errors["total"],
                        step.error_rate,
                        latency["avg"],
                        latency["p50"],
                        latency["p90"],
                        latency["p99"],
                        latency["max"],
                        step.server_cpu_pct,
                        step.agent_cpu_pct,
                        step.rss_max_bytes,
                        step.tick_ms.get("avg"),
                        step.tick_ms.get("max"),
                        step.probe_ms,
                        " ".join(step.flags),
                    ]
                )


def _harness_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("serverbench-harness")
    except PackageNotFoundError:
        return "unknown"

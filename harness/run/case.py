"""One case: a framework started, verified, measured by its ramp's case kind, stopped.

Never raises for the framework's faults: a missing framework is `skipped`, a server that
will not start or fails verify is `failed` with the reason. The case kind is chosen by
the ramp's kind through CASE_KINDS.

A case speaks one protocol (h1, h1-tls, h2, h2c). A server that does not list it, or a
process model that cannot carry it (lb:N: cleartext h1 only), is `skipped: not
supported: <why>`, never run on another protocol. Right after the server starts, one
probe connection of the harness reads what it negotiated (harness.tls.probe_tls: TLS
version, cipher, key type, ALPN; h2c: the preface answered), recorded as the case's
`negotiated` and checked as its `protocol` verify entry: a TLS handshake that fails, or
an h2 server that does not select ALPN h2, fails the case, but for a command on trial for
h2 or h2c (it did not declare its protocols: harness.negotiation), which is skipped with
what the probe found. Verify then speaks the case's protocol (harness.verify's Endpoint):
the route checks, and the protocol's own (TLS, HTTP/2) but the ones `harness verify
--protocol` keeps to itself (`case_checks`).

A server given as a command is probed for the routes it serves once it runs
(harness.verify.served_routes): a scenario on a route it answers 404 is `skipped: not
supported`, as for a baseline. It writes no telemetry line, so its figures that need one
(tick lag, the server's own counters) are empty and the summary's `limit_note` says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

from drivers import driver_class
from drivers.processes import set_load_cgroup_procs
from harness import affinity as cpu_affinity
from harness.cgroups.files import CgroupReading
from harness.cgroups.groups import Cgroup
from harness.cpu_sampler import sampled_server_environment
from harness.monitor import Monitor
from harness.negotiation import not_negotiated, on_trial
from harness.run.analysis import oom_reason
from harness.run.connection_case import run_connection_case
from harness.run.context import CaseContext, CaseKind, Measured, RunContext
from harness.run.http_case import run_http_case
from harness.run.ledger import reconcile
from harness.run.outputs import case_folder
from harness.server_process import command_unsupported, protocol_unsupported
from harness.services.sink_store import SinkStore
from harness.tls import h2c_answers, probe_tls
from harness.topology import ProcessModel, Topology, start_topology, topology_unsupported
from harness.verify import (
    H2_PROTOCOLS,
    WEBSOCKET_CHECKS,
    CheckFunction,
    Routes,
    check_text_route,
    checks_for,
    endpoint_for,
    measured_checks,
    not_supported,
    run_checks,
    served_routes,
    strictly,
)
from harness.verify.h2_attacks import ATTACKS
from model.errors import UserError
from model.results import Case, CaseStatus, Negotiated
from model.scenarios import Scenario
from servers import FRAMEWORKS
from servers.contract import ALPN_FOR_PROTOCOL, PROTOCOL_H1, PROTOCOL_H2, TLS_PROTOCOLS

CASE_KINDS: dict[str, CaseKind] = {
    "rate": run_http_case,
    "concurrency": run_http_case,
    "constant-rate": run_http_case,
    "connections": run_connection_case,
}
INTERRUPTED_STOP_S = 2.0
# what a run's verify leaves to `harness verify --protocol`: it waits out the server's head
# deadline (10 s) for a half-sent ClientHello, a slow-client property, not an answer's; the
# HTTP/2 attacks take seconds each and load the server's CPU just before it is measured
RUN_VERIFY_LEFT_OUT = ("tls-half-handshake", *ATTACKS)
NO_TELEMETRY_NOTE = (
    "no telemetry line (a server run as a command): tick lag and the server's own "
    "counters are not measured; RSS is its process tree's, CPU its cgroup's (without one, "
    "its process tree's)"
)
NO_CGROUP_MEMORY = "not measured (no cgroup): memory_peak_bytes is the process tree's RSS"


def server_cgroup(ctx: CaseContext) -> tuple[Cgroup | None, str | None]:
    """The case's server's own cgroup, pinned to its CPUs (cpuset) and capped by the run's
    --cpu-quota and --memory-max; (None, why) where the run may make none."""
    support = ctx.run.cgroups
    if support is None or not support.usable:
        return None, support.reason if support is not None else "not looked for"
    plan = ctx.run.plan
    try:
        group = Cgroup.create(
            support,
            "server",
            cpus=ctx.server_cpus,
            cpu_quota=plan.cpu_quota,
            memory_max_bytes=plan.memory_max_bytes,
        )
    except OSError as error:
        return None, f"the server's cgroup could not be made: {error}"
    return group, None


def load_cgroup(ctx: CaseContext) -> Cgroup | None:
    """The case's load generators' own cgroup, on the load's CPUs (None: the run may make
    none, or it runs on a fleet's hosts): their CPU per step is read there."""
    support = ctx.run.cgroups
    if support is None or not support.usable or ctx.run.fleet:
        return None
    try:
        return Cgroup.create(support, "load", cpus=ctx.load_cpus)
    except OSError:  # the load's CPU is then what the harness reaped (figures.agent_cpu_from)
        return None


@contextlib.contextmanager
def load_generators_in(group: Cgroup | None) -> Iterator[None]:
    """While the block runs, every load generator started joins `group`; it is removed
    after (what is still in it killed first)."""
    set_load_cgroup_procs(group.procs_files if group is not None else ())
    try:
        yield
    finally:
        set_load_cgroup_procs(())
        if group is not None:
            group.remove()


def cgroup_record(
    ctx: CaseContext,
    group: Cgroup | None,
    why_not: str | None,
    final: CgroupReading | None,
) -> dict[str, Any]:
    """What the case records of its server's cgroup (summary.cgroup): mode and why,
    pinning, limits and, from its last reading, throttling and OOM kills."""
    if group is None or final is None:
        return {
            "mode": "none",
            "reason": why_not or "the server's cgroup could not be read",
            "pinning": "taskset" if ctx.server_cpus is not None else None,
            "cpu_quota": None,
            "memory_max_bytes": None,
            "socket_memory": NO_CGROUP_MEMORY,
        }
    record: dict[str, Any] = group.describe()
    if ctx.process_model.balanced and ctx.server_cpus is not None:
        record["pinning"] = "cpuset (taskset per instance)"
    return {
        **record,
        "throttled_periods": final.throttled_periods,
        "periods": final.periods,
        "throttled_s": round(final.throttled_s, 6),
        "oom_kills": final.oom_kills,
    }


def new_case(
    run: RunContext,
    framework: str,
    model: ProcessModel,
    protocol: str,
    status: CaseStatus,
    affinity: dict[str, str | None],
    **fields: Any,
) -> Case:
    """A Case of this run's scenario, sink and driver."""
    profile = run.profile
    return Case(
        framework=framework,
        scenario=profile.scenario,
        sink=profile.sink,
        driver=profile.driver,
        process_model=model.name,
        affinity=affinity,
        status=status,
        protocol=protocol,
        **fields,
    )


def run_case(
    run: RunContext,
    framework: str,
    mode: str,
    repeat: int,
    model: ProcessModel,
    round_label: str | None = None,
    protocol: str = PROTOCOL_H1,
) -> Case:
    """One framework through the whole ramp under one affinity mode, process model and
    protocol.

    `round_label` ("round 2 of 5") marks a confirmation round (harness.run.rounds): its
    files go to a folder of its own beside the ramp's, in the case's folder
    (harness.run.outputs.case_folder).
    """
    profile = run.profile
    label = f"{framework} [{mode}]" + (f" #{repeat + 1}" if profile.repeat > 1 else "")
    if len(profile.process_models) > 1:
        label += f" {model.name}"
    if len(profile.protocols) > 1 or protocol != PROTOCOL_H1:
        label += f" {protocol}"
    if round_label is not None:
        label += f" {round_label}"
    run.reporter.case_started(label=label, steps=len(list(profile.ramp)))
    unpinned: dict[str, str | None] = {"mode": mode, "server": None, "agent": None}
    info = FRAMEWORKS[framework]
    missing = info.missing()
    if missing:
        error = f"not installed: {', '.join(missing)}"
        return new_case(run, framework, model, protocol, "skipped", unpinned, error=error)
    why_not = protocol_unsupported(info, protocol) or topology_unsupported(model, protocol)
    if why_not is not None:
        error = f"not supported: {why_not}"
        return new_case(run, framework, model, protocol, "skipped", unpinned, error=error)
    if not info.serves(run.scenario.route):
        error = f"not supported: {framework} does not serve {run.scenario.route}"
        if run.scenario.route in info.route_notes:  # why, when the registry says
            error += f" ({info.route_notes[run.scenario.route]})"
        return new_case(run, framework, model, protocol, "skipped", unpinned, error=error)
    if profile.sink not in info.sinks:
        error = f"not supported: {framework} has no {profile.sink} sink"
        return new_case(run, framework, model, protocol, "skipped", unpinned, error=error)
    if info.kind == "command":
        why = command_unsupported(info, sink=profile.sink, workers=model.workers)
        if run.scenario.protocol == "memcached":
            why = "the memcached socket service is python -m servers' own"
        if why is not None:
            error = f"not supported: {why}"
            return new_case(run, framework, model, protocol, "skipped", unpinned, error=error)
    server_cpus = run.plan.server_cpus if mode in ("both", "server") else None
    load_cpus = run.plan.load_cpus if mode in ("both", "agent") else None
    load_count = len(cpu_affinity.parse_cpu_list(load_cpus)) if load_cpus else (os.cpu_count() or 1)
    case_dir = case_folder(
        run.plan.out_dir,
        new_case(run, framework, model, protocol, "ok", unpinned).key,
        repeat=repeat,
        repeats=profile.repeat,
        round_label=round_label,
    )
    try:  # GridFS and the mongo sink share the run's database when both are asked for
        store = SinkStore(
            profile.sink,
            mongo_url=run.plan.mongo_url,
            database=run.database,
            mongo_w=profile.mongo_w,
            mongo_batch=profile.mongo_batch,
            mongo_db=run.plan.mongo_db,
            durable=profile.durable,
        )
    except UserError as error:
        return new_case(run, framework, model, protocol, "failed", unpinned, error=str(error))
    with store:
        ctx = CaseContext(
            run=run,
            framework=framework,
            mode=mode,
            process_model=model,
            server_cpus=server_cpus,
            load_cpus=load_cpus,
            load_cpu_count=load_count,
            case_dir=case_dir,
            store=store,
            protocol=protocol,
        )
        return _run_with_sink(ctx)


def _run_with_sink(ctx: CaseContext) -> Case:
    """Start (in the server's own cgroup where the run may make one), verify, measure with
    the ramp's case kind, stop; then reconcile the sink. The cgroup is removed after."""
    run = ctx.run
    affinity: dict[str, str | None] = {"mode": ctx.mode, "server": None, "agent": None}
    sink_args = ctx.store.server_args()
    backend_args = run.backends.server_args(sink_args) if run.backends else []
    group, why_not = server_cgroup(ctx)
    try:
        return _run_in_cgroup(ctx, affinity, [*sink_args, *backend_args], group, why_not)
    finally:
        if group is not None:
            group.remove()


def _run_in_cgroup(
    ctx: CaseContext,
    affinity: dict[str, str | None],
    server_args: list[str],
    group: Cgroup | None,
    why_not: str | None,
) -> Case:
    """The case with its server in `group` (None: none, `why_not`)."""
    run, framework, profile = ctx.run, ctx.framework, ctx.profile
    try:
        server = start_topology(
            framework,
            ctx.process_model,
            sink=profile.sink,
            # a loop choice applies where the framework offers it (aiohttp, tornado)
            loop=profile.loop if profile.loop in FRAMEWORKS[framework].loops else None,
            server_cpus=ctx.server_cpus,
            extra_args=server_args,
            host=run.server_host,
            protocol=ctx.protocol,
            certificates=run.certificates,
            cgroup=group,
            # a profiled round's server names its JIT's frames for the sampler
            environment=sampled_server_environment() if run.step_sampler else None,
        )
    except UserError as error:
        model, protocol = ctx.process_model, ctx.protocol
        return new_case(run, framework, model, protocol, "failed", affinity, error=str(error))
    interrupted = False
    monitor: Monitor | None = None
    final: CgroupReading | None = None
    try:  # from the moment the server runs: whatever happens, it is stopped below
        monitor = Monitor(
            server.latest_telemetry, on_sample=lambda row: run.reporter.sample(row=row)
        )
        if group is not None:  # each process joined before it exec'd (drivers.processes)
            outside = sorted(set(server.pids) - group.pids())
            if outside:
                why_not = f"pids {outside} of the server did not join its cgroup"
                group = None
            monitor.set_server_cgroup(group)
        affinity["server"] = cpu_affinity.cpus_allowed(server.pid)
        negotiated, protocol_check = probe_protocol(ctx, server)
        verify: dict[str, Any] = {}
        if protocol_check is not None:  # what the probe found, checked whether or not verify
            verify["protocol"] = protocol_check
            if not protocol_check["ok"]:
                model, status = ctx.process_model, "failed"
                error = f"verify failed: protocol: {protocol_check['detail']}"
                if on_trial(FRAMEWORKS[framework], ctx.protocol):  # not declared: not spoken
                    host, port, certificates = server.host, server.port, run.certificates
                    finding = not_negotiated(framework, ctx.protocol, host, port, certificates)
                    status, error = "skipped", f"not supported: {finding}"
                return new_case(
                    run, framework, model, ctx.protocol, status, affinity, error=error,
                    verify=verify, negotiated=negotiated,
                )  # fmt: skip
        # the (first) instance itself, reached over the case's protocol
        endpoint = endpoint_for(server.instance_url, ctx.protocol, run.certificates)
        routes = None
        if FRAMEWORKS[framework].routes is None:  # a command's: probed now it runs
            routes = served_routes(endpoint, run.backends)
            if run.scenario.route not in routes:
                how = "refuses the handshake" if run.scenario.websocket else "answers 404"
                error = f"not supported: {framework} {how} on {run.scenario.route}"
                model = ctx.process_model
                return new_case(
                    run, framework, model, ctx.protocol, "skipped", affinity, error=error,
                    negotiated=negotiated,
                )  # fmt: skip
        if run.plan.verify:
            # the contract on the instance; behind a balancer, also that the balancer
            # passes GET / through (per-instance counters and proxied WebSocket closes are
            # not the contract's to judge through nginx)
            wanted = case_checks(framework, routes, ctx.protocol, run.scenario)
            checks = run_checks(endpoint, wanted)
            if run.plan.strict_verify or profile.strict_verify:  # every warning fails
                checks = strictly(checks, framework)
            if server.balancer is not None:
                checks += run_checks(server.url, {"balancer": check_text_route})
            if routes is not None or ctx.protocol in H2_PROTOCOLS:  # not served, said so
                checks += not_supported(framework, routes=routes, protocol=ctx.protocol)
            verify |= {c.name: c.record() for c in checks}
            if any(not c.ok for c in checks):
                details = "; ".join(f"{c.name}: {c.detail}" for c in checks if not c.ok)
                error = f"verify failed: {details}"
                model = ctx.process_model
                return new_case(
                    run, framework, model, ctx.protocol, "failed", affinity, error=error,
                    verify=verify, negotiated=negotiated,
                )  # fmt: skip
        if run.database is not None:  # its CPU beside the server's (db_cpu_pct)
            monitor.set_database_pids(run.database.pids())
            monitor.set_database_cgroup(run.database_cgroup)
        monitor.start(server.pids)
        load_group = load_cgroup(ctx)
        monitor.set_load_cgroup(load_group)
        with load_generators_in(load_group):
            measured: Measured = CASE_KINDS[profile.ramp.kind](ctx, server, monitor)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            if monitor is not None:
                monitor.stop()
                monitor.write_csv(ctx.case_dir / "monitor.csv")
        finally:  # a failed monitor.csv must not leave the server running
            if interrupted:
                server.stop(INTERRUPTED_STOP_S)
            else:
                server.stop()
            if monitor is not None:  # the peak and the OOM kills outlive the processes
                final = monitor.read_server_cgroup()
    affinity["agent"] = measured.load_cpus
    record = cgroup_record(ctx, group, why_not, final)
    peak_bytes = final.memory_peak_bytes if final is not None else measured.summary.rss_max_bytes
    measured = dataclasses.replace(
        measured,
        summary=dataclasses.replace(measured.summary, cgroup=record, memory_peak_bytes=peak_bytes),
    )
    out_of_memory = oom_reason(final.oom_kills if final else 0, record["memory_max_bytes"])
    if out_of_memory is not None:  # the kernel's kill is the case's failure, first
        error = "; ".join(filter(None, (out_of_memory, measured.error)))
        measured = dataclasses.replace(measured, error=error)
    if not FRAMEWORKS[framework].telemetry:
        note = "; ".join(filter(None, (measured.summary.limit_note, NO_TELEMETRY_NOTE)))
        measured = dataclasses.replace(
            measured, summary=dataclasses.replace(measured.summary, limit_note=note)
        )
    case = new_case(
        run,
        framework,
        ctx.process_model,
        ctx.protocol,
        "failed" if measured.error else "ok",
        affinity,
        error=measured.error,
        verify=verify,
        steps=measured.steps,
        summary=measured.summary,
        negotiated=negotiated,
    )
    return reconcile(
        case,
        ctx.scenario,
        ctx.store,
        stored_before=measured.stored_before,
        messages_sent=measured.messages_sent,
        keep_dir=ctx.case_dir,
    )


def probe_protocol(
    ctx: CaseContext, server: Topology
) -> tuple[Negotiated | None, dict[str, Any] | None]:
    """What the started server negotiates, read by one probe connection, and the case's
    `protocol` verify entry (None, None for h1: nothing to negotiate). TLS: the handshake
    trusting the run's CA, and for h2 the ALPN h2 selected; h2c: SETTINGS after the
    preface. Whether the load generator verifies the certificate is its driver's word
    (the class attribute `ca_trusted`; None when it does not say)."""
    protocol = ctx.protocol
    if protocol == PROTOCOL_H1:
        return None, None
    if protocol not in TLS_PROTOCOLS:
        answered = h2c_answers(server.host, server.port)
        detail = "SETTINGS after the h2 preface" if answered else "no SETTINGS after the preface"
        return Negotiated(protocol), {"ok": answered, "detail": f"{protocol}: {detail}"}
    certificates = ctx.run.certificates
    if certificates is None:
        return None, {"ok": False, "detail": f"{protocol} without the run's certificates"}
    try:
        facts = probe_tls(server.host, server.port, protocol, certificates)
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
        return None, {"ok": False, "detail": f"TLS handshake failed: {error}"}
    ca_trusted = getattr(driver_class(ctx.profile.driver), "ca_trusted", None)
    negotiated = Negotiated(
        protocol,
        tls_version=facts["version"],
        cipher=facts["cipher"],
        key_type=facts["key_type"],
        alpn=facts["alpn"],
        ca_trusted=ca_trusted if isinstance(ca_trusted, bool) else None,
    )
    detail = f"{facts['version']}, {facts['cipher']}, {facts['key_type']}, ALPN {facts['alpn']}"
    expected = ALPN_FOR_PROTOCOL[protocol]
    # h1-tls without ALPN is HTTP/1.1 still (RFC 7301: the default); h2 is not
    if facts["alpn"] != expected and (protocol == PROTOCOL_H2 or facts["alpn"] is not None):
        return negotiated, {"ok": False, "detail": f"{detail}: ALPN {expected} not selected"}
    return negotiated, {"ok": True, "detail": detail}


def case_checks(
    framework: str, routes: Routes | None, protocol: str, scenario: Scenario
) -> dict[str, CheckFunction]:
    """The verify checks of a case: the contract's over its protocol (harness.verify's
    `checks_for`) but RUN_VERIFY_LEFT_OUT; over a protocol other than h1, the WebSocket
    rules only for a WebSocket scenario (an HTTP scenario's load over TLS or HTTP/2 never
    opens /ws; `harness verify --protocol` checks them there). A wrong answer fails the
    case only on the route its scenario measures; elsewhere it is a deviation
    (`measured_checks`)."""
    checks = checks_for(framework, routes, protocol=protocol)
    if protocol != PROTOCOL_H1 and not scenario.websocket:
        checks = {name: check for name, check in checks.items() if name not in WEBSOCKET_CHECKS}
    kept = {name: check for name, check in checks.items() if name not in RUN_VERIFY_LEFT_OUT}
    return measured_checks(kept, scenario.route)

"""The h2-attacks case kind: what one hostile HTTP/2 connection costs a server's
well-behaved clients.

h2load's clients send a paced rate (`--rps` per client) in rounds; each of verify's
attacks (harness.verify.h2_attacks.ATTACKS) runs on one connection of its own during
rounds paired with rounds without any attack (harness.run.attack_figures.round_schedule),
started just before the round and bounded by the round's length and ATTACK_MAX_BYTES.
The rate is the ramp's `rate_per_s`, or `load_fraction` of the server's closed-loop peak
measured by a first round (recorded as the case's first step, without `figures.attack`);
each round's `figures.rate_from` says which. Every round is a Step whose figures name
the attack (or `none`) and what the attacker saw; the summary's `attack_retention` holds
the per-attack goodput retained with its interval (harness.run.attack_figures).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import Any

from drivers.base import DriverOutputError, Target
from drivers.h2load import H2loadDriver
from harness.monitor import Monitor, step_stats
from harness.run.attack_figures import NO_ATTACK, attack_retention, round_schedule
from harness.run.context import CaseContext, Measured
from harness.run.http_case import AgentCpus, http_summary, http_target, server_exit
from harness.run.peak import summarize
from harness.run.step_records import build_step, failed_step, warmup_step
from harness.run.step_runners import StepRunner, local_runner
from harness.topology import Topology
from harness.verify.endpoint import Endpoint, endpoint_for
from harness.verify.failure import CheckFailed
from harness.verify.flood import DRAIN_S, FloodResult, flood
from harness.verify.h2_attacks import ATTACK_MAX_BYTES, ATTACKS, Attack
from harness.verify.h2wire import FRAME_SETTINGS, PREFACE, h2_frame, open_h2_socket
from model.figures import figure
from model.ramps import AttackRoundsRamp, RampStep
from model.results import Step

ATTACK_LEAD_S = 0.1  # the attacker's head start on the round's load


class Attacker:
    """One attack on a connection of its own, in a thread, for `duration_s` at most."""

    def __init__(self, endpoint: Endpoint, attack: Attack, duration_s: float) -> None:
        self.endpoint, self.attack, self.duration_s = endpoint, attack, duration_s
        self.result: FloodResult | None = None
        self.error = ""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            with open_h2_socket(self.endpoint) as sock:
                sock.sendall(PREFACE + h2_frame(FRAME_SETTINGS))
                flood_ = self.attack.flood(self.endpoint)
                self.result = flood(
                    sock, flood_, self.duration_s, ATTACK_MAX_BYTES, lambda _elapsed_s: None
                )
        except (CheckFailed, OSError) as error:  # refused at once: the round says so
            self.error = f"{type(error).__name__}: {error}"[:200]

    def start(self) -> None:
        self.thread.start()
        time.sleep(ATTACK_LEAD_S)

    def join(self) -> None:
        self.thread.join(self.duration_s + DRAIN_S + 10)

    def figures(self) -> dict[str, Any]:
        """What the attacker saw, by StepFigures field."""
        result = self.result
        if result is None:
            return {"attack_ending": "not-connected", "attack_units_sent": 0}
        return {
            "attack_ending": result.ending,
            "attack_goaway_code": result.goaway_code,
            "attack_units_sent": result.units_sent,
            "attack_bytes_sent": result.bytes_sent,
            "attack_s": round(result.duration_s, 3),
        }


@dataclasses.dataclass
class AttackRounds:
    """What every round of one case shares: the server, its load and where it goes."""

    ctx: CaseContext
    server: Topology
    monitor: Monitor
    target: Target
    agent: AgentCpus
    recorded: list[Step] = dataclasses.field(default_factory=list)

    def run(
        self,
        runner: StepRunner,
        driver_step: RampStep,
        recorded_as: RampStep,
        attacker: Attacker | None,
        measured: dict[str, Any],
    ) -> Step:
        """One round: the attacker (if any) started, the load run, both ended, recorded."""
        reporter = self.ctx.run.reporter
        reporter.step_started(index=driver_step.index, offered=recorded_as.offered, unit="req/s")
        self.monitor.begin_step(driver_step.index)
        label = f"round{driver_step.index:03d}-{measured.get('attack') or 'peak'}"
        result, reason = None, ""
        try:
            if attacker is not None:
                attacker.start()
            result = runner(
                driver_step, label, self.agent.note, lambda: server_exit(self.server), None
            )
        except DriverOutputError as error:
            reason = str(error)
        finally:
            window = self.monitor.end_step()
            if attacker is not None:
                attacker.join()
        stats = step_stats(self.monitor.rows, self.server.telemetry_lines(), window)
        if attacker is not None:
            measured = {**measured, **attacker.figures()}
        if result is None:
            step = failed_step(recorded_as, reason, stats)
            step = dataclasses.replace(step, figures=dataclasses.replace(step.figures, **measured))
        else:
            measured = {**measured, "negotiated": result.negotiated}
            step = build_step(
                recorded_as, result, stats, probe_ms=None, flags=[], measured=measured
            )
        self.recorded.append(step)
        reporter.step_finished(step=step)
        return step


def run_attack_case(ctx: CaseContext, server: Topology, monitor: Monitor) -> Measured:
    """The peak round (unless the profile fixes the rate), then every attack's rounds
    paired with rounds without; the summary with each attack's retention."""
    ramp = ctx.profile.ramp
    assert isinstance(ramp, AttackRoundsRamp), "the h2-attacks case kind runs its own ramp"
    agent = AgentCpus(monitor)
    attacks = ramp.attacks
    unknown = [a for a in attacks if a not in ATTACKS]
    why = (
        "h2-attacks rounds run on this machine, not over a fleet"
        if ctx.run.fleet is not None
        else f"unknown attack {', '.join(unknown)}: choose from {', '.join(ATTACKS)}"
        if unknown
        else None
    )
    if why is not None:
        return Measured((), summarize([]), None, error=why)
    rounds = AttackRounds(ctx, server, monitor, http_target(ctx, server), agent)
    endpoint = endpoint_for(server.instance_url, ctx.protocol, ctx.run.certificates)
    rate, rate_from, error = _rate(rounds, ramp)
    if error is None:
        paced = H2loadDriver(ctx.load_cpu_count, ramp.clients, rps_per_client=rate / ramp.clients)
        runner = local_runner(ctx, paced, rounds.target)
        base = {"rps_per_client": round(rate / ramp.clients, 1), "rate_from": rate_from}
        for pair, attack in round_schedule(attacks, ramp.pairs):
            index = len(rounds.recorded)
            driver_step = RampStep(
                index, ramp.clients * ramp.streams, "concurrency", duration_s=ramp.round_s
            )
            recorded_as = RampStep(index, round(rate, 1), "req/s", duration_s=ramp.round_s)
            attacker = (
                None if attack == NO_ATTACK else Attacker(endpoint, ATTACKS[attack], ramp.round_s)
            )
            figures = {**base, "attack": attack, "round": pair, "round_s": ramp.round_s}
            rounds.run(runner, driver_step, recorded_as, attacker, figures)
            exited = server_exit(server)
            if exited is not None:
                error = f"{exited} during round {index} ({attack}): {server.stderr_tail()}"
                break
            time.sleep(ctx.profile.cooldown_s)
    recorded = rounds.recorded
    summary = dataclasses.replace(
        http_summary(ctx, server, recorded), attack_retention=attack_retention(recorded)
    )
    return Measured(tuple(recorded), summary, agent.cpus, error)


def _rate(rounds: AttackRounds, ramp: AttackRoundsRamp) -> tuple[float, str, str | None]:
    """The rounds' rate (req/s), where it came from, and why the case cannot go on (None):
    the profile's, or `load_fraction` of a closed-loop peak round (warmed up first)."""
    ctx = rounds.ctx
    if ramp.rate_per_s:
        return ramp.rate_per_s, "the profile", None
    closed = H2loadDriver(ctx.load_cpu_count, ramp.clients)
    runner = local_runner(ctx, closed, rounds.target)
    peak_step = RampStep(0, ramp.peak_concurrency, "concurrency", duration_s=ramp.peak_s)
    if ctx.profile.warmup_s > 0:
        # a failed warm-up says nothing the peak round will not say
        with contextlib.suppress(DriverOutputError):
            runner(warmup_step(peak_step, ctx.profile.warmup_s), "warmup", None, None, None)
    peak = rounds.run(runner, peak_step, peak_step, None, {})
    if peak.achieved <= 0:
        return 0.0, "", f"the closed-loop peak round got no reply: {peak.figures.driver_error}"
    rate = ramp.load_fraction * peak.achieved
    said = f"{ramp.load_fraction * 100:g} % of the closed-loop peak {figure(peak.achieved)} req/s"
    return rate, said, None

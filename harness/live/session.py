"""`--live` and `--prometheus` for a run: the servers started, the reporter that feeds them
beside the console's, the run's end.

Both listen on 127.0.0.1 unless the option names another host (`--live 0.0.0.0:8089`,
harness.live.address), which is printed as a warning: the page and the metrics name the
servers, the CPUs and the run's directory, and serve the report's files.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.live.address import parse_listen
from harness.live.reporters import LiveReporter
from harness.live.server import Hub, LiveServer, start_broadcaster
from harness.live.state import LiveState
from model.errors import UserError

if TYPE_CHECKING:
    from harness.run.plan import Plan, Reporter

DRAIN_S = 1.0  # at the end, how long the pages' queues may take to empty


def _step_seconds(plan: Plan) -> float | None:
    """A ramp step's planned length: its duration, or a connection ramp's hold."""
    ramp = plan.profile.ramp
    return getattr(ramp, "duration_s", None) or getattr(ramp, "hold_s", None)


@dataclass
class LiveSession:
    """The servers of `--live` and `--prometheus` for one run."""

    servers: dict[str, LiveServer]
    hub: Hub = field(default_factory=Hub)
    state: LiveState | None = None
    public: dict[str, bool] = field(default_factory=dict)  # a server's host off loopback

    def announce(self, say: Callable[[str], None]) -> None:
        """Where the page and the metrics are, each on a line of its own (and a warning
        for an address beyond this machine)."""
        for name, server in self.servers.items():
            say(
                f"live page: {server.url}"
                if name == "page"
                else f"prometheus metrics: {server.url}metrics"
            )
            if self.public.get(name):
                say(
                    f"warning: {server.url} listens beyond this machine ({server.host}): "
                    "anyone who reaches it sees the run, its servers and its report"
                )

    def reporters(self, plan: Plan, cases_total: int) -> list[Reporter]:
        """The live state made for `plan`, and its reporter (to fan out beside the
        console's)."""
        state = LiveState(
            run_id=plan.run_id,
            profile=plan.profile.name,
            frameworks=plan.frameworks,
            cases_total=cases_total,
            step_s=_step_seconds(plan),
            round_s=plan.profile.round_duration_s,
        )
        return [self.watch(state, plan.out_dir)]

    def watch(self, state: LiveState, run_dir: Path | None) -> LiveReporter:
        """`state` served by the page and the exporter, and the reporter that feeds it
        (`run_dir`: where the run's run.json settles the finished cases; None: a bench)."""
        self.state = state
        self.hub.attach(state)
        return LiveReporter(state, run_dir)

    def finished(self, status: str, report: Path | None) -> str | None:
        """The run ended: the page links its report, served from the run's directory (the
        report's URL; None without a page or a report)."""
        url = None
        if report is not None and "page" in self.servers:
            self.hub.report_dir = report.parent
            url = f"{self.servers['page'].url}report/{report.name}"
        if self.state is not None:
            self.state.finished(status, url)
        return url

    def end(self, say: Callable[[str], None]) -> None:
        """The pages sent the run's end (a second at most); at a terminal, the page and its
        report kept up until Enter or Ctrl-C; then the servers stopped."""
        if "page" in self.servers:
            self.hub.drain(DRAIN_S)
            if sys.stdin.isatty():
                say("live page: still serving the report; Enter or Ctrl-C stops it")
                with contextlib.suppress(EOFError, KeyboardInterrupt):
                    input()
        self.close()

    def interrupted(self) -> None:
        """The run was stopped (Ctrl-C, a signal): the pages told, then the servers stopped."""
        self.finished("interrupted", None)
        self.hub.drain(DRAIN_S)
        self.close()

    def close(self) -> None:
        self.hub.stopping.set()
        if self.state is not None:
            self.state.wake()
        for server in self.servers.values():
            server.close()


def start_live(live: str | None, prometheus: str | None) -> LiveSession | None:
    """The servers asked for, listening (None when neither was asked for); a port that
    cannot be had is a UserError naming the option. `LiveSession.announce` says where."""
    wanted = {
        name: parse_listen(spec, option)
        for name, spec, option in (
            ("page", live, "--live"),
            ("metrics", prometheus, "--prometheus"),
        )
        if spec is not None
    }
    if not wanted:
        return None
    hub = Hub()
    servers: dict[str, LiveServer] = {}
    try:
        for name, address in wanted.items():
            try:
                servers[name] = LiveServer(address.host, address.port, hub, name)
            except OSError as error:
                option = "--live" if name == "page" else "--prometheus"
                raise UserError(
                    f"{option}: cannot listen on {address.host}:{address.port} "
                    f"({error.strerror}): choose another port, or 0 for one the OS picks"
                ) from None
    except BaseException:
        for server in servers.values():
            server.close()
        raise
    session = LiveSession(servers, hub, public={n: a.public for n, a in wanted.items()})
    start_broadcaster(hub)
    return session

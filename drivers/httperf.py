"""httperf: open-loop connection-rate steps, as autobench drives it.

httperf multiplexes with select(), so one process holds at most FD_SETSIZE (1,024)
sockets. A step whose connections could pile up past that (rate × timeout) is split over
several processes, each with `--client i/n`, rate/n and connections/n, and the result
says how many ran (`figures.processes`). httperf busy-polls (its own CPU figure is ~100 %
whatever the load), so `driver_bound` for it means "offered fewer connections per second
than asked", read from its Connection rate line.

httperf sends no request body from the command line: POST scenarios go out with an empty
body (Content-Length: 0), which /log stores as an empty record.
"""

from __future__ import annotations

import math
import re
import signal
from pathlib import Path
from typing import Self

from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target, no_latency
from model.ramps import Ramp, RampStep, RateRamp
from model.step_figures import StepFigures

FD_SETSIZE = 1024
SOCKETS_PER_PROCESS = 1000  # headroom under FD_SETSIZE for stdio and the listening files
MAX_PROCESSES = 8

_TOTAL = re.compile(
    r"Total: connections (\d+) requests (\d+) replies (\d+) test-duration ([\d.]+) s"
)
_CONNECTION_RATE = re.compile(r"Connection rate: ([\d.]+) conn/s .*?<=(\d+) concurrent")
_CONNECTION_TIME = re.compile(
    r"Connection time \[ms\]: min ([\d.]+) avg ([\d.]+) max ([\d.]+) median ([\d.]+)"
)
_REPLY_RATE = re.compile(r"Reply rate \[replies/s\]: min [\d.]+ avg ([\d.]+) .*\((\d+) samples\)")
_REPLY_TIME = re.compile(r"Reply time \[ms\]: response ([\d.]+) transfer ([\d.]+)")
_STATUS = re.compile(r"Reply status: 1xx=(\d+) 2xx=(\d+) 3xx=(\d+) 4xx=(\d+) 5xx=(\d+)")
_CPU = re.compile(r"CPU time \[s\]: .*total ([\d.]+)%\)")
_ERRORS_1 = re.compile(
    r"Errors: total (\d+) client-timo (\d+) socket-timo (\d+) connrefused (\d+) connreset (\d+)"
)
_ERRORS_2 = re.compile(r"Errors: fd-unavail (\d+) addrunavail (\d+) ftab-full (\d+) other (\d+)")


def _find(pattern: re.Pattern[str], text: str) -> re.Match[str]:
    match = pattern.search(text)
    if match is None:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else "(no output)"
        raise DriverOutputError(f"httperf output lacks {pattern.pattern[:40]!r}: {last}")
    return match


def parse_httperf(text: str) -> DriverResult:
    """Parse one httperf run's summary."""
    connections, _requests, replies, duration = _find(_TOTAL, text).groups()
    status = [int(n) for n in _find(_STATUS, text).groups()]
    errors_1 = [int(n) for n in _find(_ERRORS_1, text).groups()]
    errors_2 = [int(n) for n in _find(_ERRORS_2, text).groups()]
    connection_rate, concurrent = _find(_CONNECTION_RATE, text).groups()
    response_ms, transfer_ms = (float(n) for n in _find(_REPLY_TIME, text).groups())
    reply_rate_avg, samples = _find(_REPLY_RATE, text).groups()
    connection_time = _CONNECTION_TIME.search(text)
    cpu = _CPU.search(text)
    good_replies = status[1]
    latency = no_latency()
    if good_replies:
        latency["avg"] = response_ms + transfer_ms
    duration_s = float(duration)
    return DriverResult(
        replies=good_replies,
        duration_s=duration_s,
        errors={
            "timeout": errors_1[1] + errors_1[2],
            "connect": errors_1[3],
            "reset": errors_1[4],
            "status": status[0] + status[2] + status[3] + status[4],
            "other": errors_2[3],
            "driver_fd_unavailable": errors_2[0],
            "driver_addr_unavailable": errors_2[1],
            "driver_ftab_full": errors_2[2],
        },
        latency_ms=latency,
        # autobench's reading: the 5 s reply-rate samples; short runs have none.
        achieved=float(reply_rate_avg) if int(samples) and not status[3] + status[4] else None,
        driver_cpu_pct=float(cpu.group(1)) if cpu else None,
        figures=StepFigures(
            connections=int(connections),
            replies_all=int(replies),
            connection_rate_per_s=float(connection_rate),
            max_concurrent_connections=int(concurrent),
            connection_time_median_ms=float(connection_time.group(4)) if connection_time else None,
        ),
    )


def processes_needed(rate_per_s: float, timeout_s: float) -> int:
    """How many httperf processes keep each under FD_SETSIZE if replies stall to the timeout."""
    return max(1, min(MAX_PROCESSES, math.ceil(rate_per_s * timeout_s / SOCKETS_PER_PROCESS)))


class HttperfDriver:
    """Open loop: `--rate` connections/s, `--num-calls` requests each, `--num-conns` per step."""

    name = "httperf"
    tool = "httperf"
    package = "httperf"
    tool_version_args = ("--version",)
    ramp_kinds = ("rate",)
    protocols = ("h1",)
    # httperf: SIGINT ends the test and prints its totals (test-duration the real one)
    stop_signal = signal.SIGINT
    busy_polls = True
    checks_bodies = False

    def __init__(self, calls_per_connection: int = 10) -> None:
        self.calls_per_connection = calls_per_connection

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        calls = ramp.calls_per_connection if isinstance(ramp, RateRamp) else 1
        return cls(calls_per_connection=calls)

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        rate = step.offered / self.calls_per_connection
        connections = step.connections or int(rate * (step.duration_s or 10))
        count = processes_needed(rate, target.timeout_s)
        commands = []
        for client in range(count):
            command = [
                "httperf",
                "--hog",
                f"--server={target.host}",
                f"--port={target.port}",
                f"--uri={target.scenario.path}",
                f"--rate={rate / count:g}",
                f"--num-conns={max(1, connections // count)}",
                f"--num-calls={self.calls_per_connection}",
                f"--timeout={target.timeout_s:g}",
                f"--client={client}/{count}",
            ]
            if target.scenario.method != "GET":
                command += [
                    f"--method={target.scenario.method}",
                    "--add-header=Content-Length: 0\\n",
                ]
            commands.append(command)
        return commands

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_httperf(text)

"""wrk: closed-loop concurrency steps, with a Lua `done()` report parsed as JSON.

Pipelined scenarios (TechEmpower's plaintext) write `pipeline_depth` requests at once
(TechEmpower's pipeline.lua); a scenario's own headers go with every request.
Random-path scenarios (the autobench study's URL list) pick each request's path with
`request()`; checked scenarios (the memcached-proxy study) compare every 2xx body in
`response()` and count the others as `wrong` — wrk then parses bodies, which costs it some
speed, so the load CPU is watched.

Protocols: h1, and h1-tls from the Target's https URL (wrk 4.1 speaks TLS through
OpenSSL, offers no ALPN, and does not verify the server's certificate: a TLS step
trusts whatever the port presents; the harness checks the certificate and what the
server negotiates once per case, before any step). wrk does not report what it spoke.
"""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path
from typing import Self

from drivers.base import DriverOptions, DriverOutputError, DriverResult, Target
from model.ramps import Ramp, RampStep
from model.scenarios import HEADERS, PIPELINING
from model.step_figures import StepFigures

REPORT_PREFIX = "WRK_JSON "

# wrk calls done() once at the end; latency is in microseconds. `wrong` is summed over
# the threads' own counters (each thread runs its own Lua state; setup() keeps them).
# The histogram itself is not exported: wrk 4.1 gives Lua its buckets only one at a time
# (`latency(i)`, the i-th non-empty one, found by scanning from the minimum on every
# call), so reading them all costs buckets × range steps — 20,000 × 200,000 for a step
# with 200 ms outliers, minutes of done(). Its percentiles are read instead.
DONE_FUNCTION = r"""
local threads = {}
setup = function(thread)
  thread:set("thread_index", #threads + 1)
  table.insert(threads, thread)
end
done = function(summary, latency, requests)
  local e = summary.errors
  local wrong = 0
  for _, thread in ipairs(threads) do
    wrong = wrong + (thread:get("wrong") or 0)
  end
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"wrong":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.3f,"max":%d,"stdev":%.3f,' ..
    '"p50":%d,"p90":%d,"p99":%d,"p999":%d,"p9999":%d}}\n',
    summary.requests, summary.duration, summary.bytes, wrong,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency:percentile(99.99)))
end
"""


RANDOM_PATHS = r"""
init = function(args)
  math.randomseed(1000 + (thread_index or 0))
end
request = function()
  return wrk.format(nil, paths[math.random(#paths)])
end
"""
# TechEmpower's pipeline.lua: each write is `depth` requests at once; wrk counts the
# requests in the buffer and reads as many replies, in order, before writing again.
PIPELINE = r"""
init = function(args)
  local batch = {}
  for i = 1, depth do
    batch[i] = wrk.format()
  end
  pipelined = table.concat(batch)
end
request = function()
  return pipelined
end
"""
CHECK_BODY = r"""
wrong = 0
response = function(status, headers, body)
  if status >= 200 and status < 300 and body ~= expected then
    wrong = wrong + 1
  end
end
"""


def lua_string(data: bytes) -> str:
    """`data` as a Lua string literal (every byte escaped: any value is safe)."""
    return '"' + "".join(f"\\{byte}" for byte in data) + '"'


def lua_script(target: Target) -> str:
    """The request the scenario asks for, random paths, body checks, and the done() report."""
    scenario = target.scenario
    lines = [f'wrk.method = "{scenario.method}"']
    if scenario.body is not None:
        lines.append(f"wrk.body = {json.dumps(scenario.body.decode())}")
    if scenario.content_type:
        lines.append(f'wrk.headers["Content-Type"] = "{scenario.content_type}"')
    for name, value in scenario.headers:
        lines.append(f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}")
    if scenario.pipeline_depth > 1:
        lines.append(f"depth = {scenario.pipeline_depth}")
        lines.append(PIPELINE)
    if target.paths:
        lines.append("paths = {" + ",".join(json.dumps(p) for p in target.paths) + "}")
        lines.append(RANDOM_PATHS)
    if target.expected_body is not None:
        lines.append(f"expected = {lua_string(target.expected_body)}")
        lines.append(CHECK_BODY)
    return "\n".join(lines) + "\n" + DONE_FUNCTION


def parse_wrk(text: str) -> DriverResult:
    """Parse wrk's output with our done() report line; DriverOutputError when there is none.

    wrk counts non-2xx replies among its requests and as `status` errors; a timed-out
    request is not a reply. Good replies are requests minus status errors and minus
    `wrong` bodies (checked scenarios).
    """
    for line in text.splitlines():
        if line.startswith(REPORT_PREFIX):
            report = json.loads(line[len(REPORT_PREFIX) :])
            latency_us = report["latency_us"]
            errors = dict(report["errors"])
            errors["wrong"] = int(report.get("wrong", 0))
            duration_s = report["duration_us"] / 1e6
            replies = report["requests"] - errors["status"] - errors["wrong"]
            return DriverResult(
                replies=replies,
                duration_s=duration_s,
                errors=errors,
                latency_ms={
                    "avg": latency_us["mean"] / 1000.0,
                    "p50": latency_us["p50"] / 1000.0,
                    "p90": latency_us["p90"] / 1000.0,
                    "p99": latency_us["p99"] / 1000.0,
                    "p99.9": latency_us["p999"] / 1000.0,
                    # reports before harness.run/4 stopped at p99.9
                    "p99.99": latency_us["p9999"] / 1000.0 if "p9999" in latency_us else None,
                    "max": latency_us["max"] / 1000.0,
                },
                figures=StepFigures(
                    bytes_read=report["bytes"],
                    requests=report["requests"],
                    megabytes_per_s=round(report["bytes"] / duration_s / 1e6, 3)
                    if duration_s
                    else 0.0,
                ),
            )
    first_line = text.strip().splitlines()[0] if text.strip() else "(no output)"
    raise DriverOutputError(f"wrk output has no {REPORT_PREFIX.strip()} report line: {first_line}")


class WrkDriver:
    """Closed loop: `step.offered` connections for `step.duration_s`, threads ≤ agent CPUs."""

    name = "wrk"
    tool = "wrk"
    package = "wrk"
    tool_version_args = ("-v",)
    ramp_kinds = ("concurrency",)
    protocols = ("h1", "h1-tls")
    ca_trusted = False  # wrk cannot be told a CA and verifies no certificate
    # wrk: SIGINT stops its threads and prints the summary of the requests so far
    stop_signal = signal.SIGINT
    busy_polls = False
    checks_bodies = True
    features = frozenset({PIPELINING, HEADERS})  # model.scenarios: what it can send

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads

    @classmethod
    def from_profile(cls, ramp: Ramp, load_cpu_count: int, options: DriverOptions) -> Self:
        return cls(threads=load_cpu_count)

    def commands(self, step: RampStep, target: Target, workdir: Path) -> list[list[str]]:
        script = workdir / "wrk-report.lua"
        script.write_text(lua_script(target))
        connections = int(step.offered)
        threads = max(1, min(self.threads, connections))
        return [
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                # whole seconds: wrk takes no fraction (`-d5.8s` is a usage error); its
                # report's duration is the one measured
                f"-d{math.ceil(round(step.duration_s or 0.0, 6))}s",
                f"--timeout={target.timeout_s:g}s",
                "-s",
                str(script),
                target.urls()[0],
            ]
        ]

    def parse(self, text: str, target: Target, step: RampStep, workdir: Path) -> DriverResult:
        return parse_wrk(text)

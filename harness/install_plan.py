"""What `harness doctor --install` is about to do, and how far it has got, in words.

On a fresh machine the install takes minutes (oha is built from crates.io with cargo:
about four on two cores; FerretDB with go), so it says first what it will install and
why, then a line per step when it starts and when it ends with its elapsed seconds, and
cargo's progress in between (`CargoProgress`: a line at most every PROGRESS_EVERY_S
seconds from cargo's own `Compiling …` lines, never one line per crate).

Everything here is pure (the plan from what is missing, the lines from cargo's output
and a clock given to it); harness.doctor runs the steps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.tools import Tool, ToolStatus

PROGRESS_EVERY_S = 15.0
# what each kind of step costs on a fresh 2-core machine, so a reader knows what to expect
APT_ESTIMATE = "a minute or two"
CARGO_ESTIMATE = "about 4 minutes on 2 cores"
NPM_ESTIMATE = "under a minute"
GO_ESTIMATE = "a few minutes"
PROBE_ESTIMATE = "seconds"
NODE_DIR = "servers/baselines/node"
NODE_MODULES = f"{NODE_DIR}/node_modules"
_COMPILING = re.compile(r"^\s*Compiling (\S+ v\S+)")


@dataclass(frozen=True)
class InstallStep:
    """One step of the install: what it runs, why the harness needs it, how long."""

    kind: str  # apt, cargo, npm, go, probe
    what: str  # "apt-get install h2load nginx", "cargo install oha --version 1.4.5"
    why: str  # "h2load: the h2load driver; nginx: the nginx baseline …"
    estimate: str  # "about 4 minutes on 2 cores"
    tool: str = ""  # a cargo step's tool (its name in harness.tools.TOOLS)

    def line(self) -> str:
        """The step as the plan lists it."""
        return f"{self.what} ({self.estimate}): {self.why}"


def install_plan(
    missing: Sequence[Tool],
    *,
    node_modules_missing: bool,
    ferretdb_missing: bool,
    w0_probe_missing: bool,
) -> list[InstallStep]:
    """The steps that install what is missing, in the order `harness doctor --install`
    runs them: the Debian packages in one apt-get, each cargo-built tool, the Node
    baselines' packages, FerretDB, then FerretDB's w: 0 probe."""
    steps = []
    packaged = [tool for tool in missing if tool.crate is None]
    if packaged:
        packages = sorted({tool.package for tool in packaged})
        steps.append(
            InstallStep(
                "apt",
                f"apt-get install {' '.join(packages)}",
                "; ".join(f"{tool.name}: {tool.purpose or tool.package}" for tool in packaged),
                APT_ESTIMATE,
            )
        )
    for tool in missing:
        if tool.crate is not None:
            crate, version = tool.crate
            steps.append(
                InstallStep(
                    "cargo",
                    f"cargo install {crate} --version {version}",
                    f"{tool.name}: {tool.purpose or 'a load generator'} (built from crates.io)",
                    CARGO_ESTIMATE,
                    tool.name,
                )
            )
    if node_modules_missing:
        why = "the Node http and Express baselines' packages"
        steps.append(InstallStep("npm", f"npm ci in {NODE_DIR}", why, NPM_ESTIMATE))
    if ferretdb_missing:
        why = "FerretDB: the mongo sink's and GridFS's database, on PostgreSQL"
        steps.append(InstallStep("go", "go build FerretDB", why, GO_ESTIMATE))
    if w0_probe_missing:
        why = "whether FerretDB keeps unacknowledged (w: 0) writes, said by `harness doctor`"
        steps.append(InstallStep("probe", "FerretDB's w: 0 probe", why, PROBE_ESTIMATE))
    return steps


def plan_lines(steps: Sequence[InstallStep], present: Sequence[ToolStatus]) -> list[str]:
    """What `harness doctor --install` prints before it starts: each tool already here
    (with its version and path), then each step, or that nothing is missing."""
    lines = [
        f"have {status.name} {status.version or ''} ({status.path})".replace("  ", " ")
        for status in present
        if status.path is not None
    ]
    if not steps:
        return [*lines, "nothing to install"]
    lines.append(f"to install, {len(steps)} step{'' if len(steps) == 1 else 's'}:")
    lines += [f"  {index}. {step.line()}" for index, step in enumerate(steps, 1)]
    return lines


def step_started(index: int, count: int, step: InstallStep) -> str:
    return f"[{index}/{count}] {step.what} …"


def step_done(index: int, count: int, step: InstallStep, elapsed_s: float) -> str:
    return f"[{index}/{count}] {step.what}: done in {elapsed_s:.0f} s"


class CargoProgress:
    """cargo's `Compiling crate vX` lines summarised: `feed` returns a line at most every
    `every_s` seconds (the crates compiled so far, the latest, the seconds elapsed)."""

    def __init__(self, started_s: float, every_s: float = PROGRESS_EVERY_S) -> None:
        self.started_s = started_s
        self.every_s = every_s
        self.compiled = 0
        self.latest = ""
        self._last_said_s = started_s

    def feed(self, line: str, now_s: float) -> str | None:
        """The progress line to print after cargo's `line` at `now_s`, or None."""
        match = _COMPILING.match(line)
        if match:
            self.compiled += 1
            self.latest = match.group(1)
        if not self.compiled or now_s - self._last_said_s < self.every_s:
            return None
        self._last_said_s = now_s
        return self.summary(now_s)

    def summary(self, now_s: float) -> str:
        """The crates compiled so far, the latest, and the seconds since the start."""
        crates = f"{self.compiled} crate{'' if self.compiled == 1 else 's'}"
        return f"  cargo: {crates} compiled, {now_s - self.started_s:.0f} s (latest {self.latest})"

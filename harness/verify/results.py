"""What a verification found: one `Check` per verified property, a framework's
`Verification`, running checks into them (`run_checks`), and the checks of the server's
own life (its telemetry lines, its stop on SIGTERM)."""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import asdict, dataclass, field

import httpx
from h2.exceptions import H2Error
from websockets.exceptions import WebSocketException

from harness.verify.endpoint import CheckFunction, EndpointOrUrl
from harness.verify.failure import FAILURE_REMEDY, CheckFailed, one_line
from harness.verify.severity import Deviation, Outcome
from servers import contract


@dataclass(frozen=True)
class Check:
    """One verified property: its name, whether it held, and what was seen; a check that
    held may carry deviations (harness.verify.severity): warnings unless declared."""

    name: str
    ok: bool
    detail: str = ""
    supported: bool = True  # False: the server does not serve this route (not a failure)
    deviations: tuple[Deviation, ...] = ()
    figures: dict[str, object] = field(default_factory=dict, hash=False)  # what it measured

    @property
    def warnings(self) -> tuple[Deviation, ...]:
        """The deviations the server does not declare."""
        return tuple(d for d in self.deviations if d.warning)

    def record(self) -> dict[str, object]:
        """The check as a case's `verify` entry in run.json: ok, detail, and its
        deviations when it has any."""
        entry: dict[str, object] = {"ok": self.ok, "detail": self.detail}
        if self.deviations:
            entry["deviations"] = [d.to_dict() for d in self.deviations]
        if self.figures:
            entry["figures"] = self.figures
        return entry


def strictly(checks: tuple[Check, ...], server: str | None = None) -> tuple[Check, ...]:
    """`--strict-verify`: every check with a warning fails, its detail each warning's
    whole line (declared deviations stay what they are)."""
    return tuple(
        dataclasses.replace(
            check,
            ok=False,
            detail="; ".join(d.line(server, with_check=False) for d in check.warnings),
        )
        if check.warnings
        else check
        for check in checks
    )


@dataclass(frozen=True)
class Verification:
    """Every check of one framework (with one sink)."""

    framework: str
    sink: str
    checks: tuple[Check, ...] = field(default_factory=tuple)
    error: str | None = None  # the server could not be started
    skipped: str | None = None  # the framework does not offer this sink or protocol (yet)
    protocol: str = contract.PROTOCOL_H1  # what the checks spoke (servers.contract.PROTOCOLS)

    @property
    def ok(self) -> bool:
        return self.error is None and all(c.ok for c in self.checks)

    @property
    def warnings(self) -> tuple[Deviation, ...]:
        """Every undeclared deviation of the checks that held (under --strict-verify a
        check with one fails: its warnings are its failure)."""
        return tuple(d for c in self.checks if c.ok for d in c.warnings)

    def to_dict(self) -> dict[str, object]:
        return {
            "framework": self.framework,
            "sink": self.sink,
            "protocol": self.protocol,
            "ok": self.ok,
            "error": self.error,
            "skipped": self.skipped,
            "checks": [asdict(c) for c in self.checks],
        }


def run_checks(server: EndpointOrUrl, checks: dict[str, CheckFunction]) -> tuple[Check, ...]:
    """Run every check against the server (an Endpoint, or a cleartext base URL); a
    failing one never stops the rest. A check that returns an Outcome held with the
    deviations it carries."""
    results = []
    for name, check in checks.items():
        try:
            said = check(server)
            if isinstance(said, Outcome):
                check = Check(name, True, said.detail, deviations=said.deviations)
                results.append(dataclasses.replace(check, figures=dict(said.figures)))
            else:
                results.append(Check(name, True, said))
        except CheckFailed as failure:
            results.append(Check(name, False, str(failure), figures=failure.figures))
        except (
            httpx.HTTPError,
            WebSocketException,
            H2Error,
            OSError,
            ValueError,
            AssertionError,
        ) as error:
            results.append(Check(name, False, raised_line(error)))
    return tuple(results)


# How much of a client library's error message a failure's line keeps.
ERROR_CHARS = 200


def raised_line(error: BaseException) -> str:
    """A check stopped by a client library's error (a refused connection, a timeout), as
    one line: what came (the message cut at ERROR_CHARS, with `…`), and the remedy."""
    said = one_line(str(error))
    if len(said) > ERROR_CHARS:
        said = said[:ERROR_CHARS] + "…"
    came = f"{type(error).__name__}: {said}" if said else type(error).__name__
    return f"came {came} (the check stopped there); {FAILURE_REMEDY}"


def check_telemetry(lines: list[dict[str, object]]) -> Check:
    """The server's telemetry lines: at least one, the last with every contract field."""
    if not lines:
        return Check("telemetry", False, "no telemetry line")
    missing = set(contract.TELEMETRY_FIELDS) - set(lines[-1])
    if missing:
        return Check("telemetry", False, f"missing fields {sorted(missing)}")
    return Check("telemetry", True, f"{len(lines)} lines, every field present")


NO_TELEMETRY = "not supported (a server run as a command writes no telemetry line)"


def stopped_cleanly(status: int, contract_server: bool) -> tuple[bool, str]:
    """Whether an exit status after SIGTERM is a clean stop, and how it reads. Ours exit 0
    (the contract); a server run as a command may also end by the SIGTERM itself once
    it has shut down (uvicorn re-raises it), which `stop` saw within the grace."""
    if status == 0:
        return True, "exit status 0"
    if not contract_server and status == -signal.SIGTERM:
        return True, f"exit status {status}: ended by the SIGTERM, within the grace"
    return False, f"exit status {status}"

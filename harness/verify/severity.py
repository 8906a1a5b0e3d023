"""How much a verify finding weighs.

- **A failure** — a wrong answer on a route the case measures (status, body, the headers
  the contract fixes, a record not stored), or a server that stops serving: the case is
  not measured. A check says so by raising `CheckFailed`.
- **A deviation** — a robustness rule bent (a malformed request served instead of
  refused: oversized headers accepted, a lenient framing rule): the server answers what it
  is measured on rightly, so it is measured, and the deviation is recorded (run.json, the
  summary, the report, `harness verify`). A check says so by returning an `Outcome` that
  carries `Deviation`s. One the server declares in its `deviations` table is *declared*
  (known, not a warning); one it does not is a *warning*. `--strict-verify` (or a
  profile's `strict_verify = true`) makes every warning a failure.

Every finding reads as one whole line: the check, what was sent, what was expected, what
came, and the remedy — the `deviations` key that declares it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.verify.failure import CheckFailed, one_line
from servers import FRAMEWORKS


def remedy(key: str, server: str | None = None) -> str:
    """How to declare a deviation, naming its key and (when known) the server's table."""
    table = f"[servers.{server}]" if server else "the server's table"
    return (
        f'to accept it, declare it: deviations = {{ {key} = "why" }} in {table} of a '
        "servers file (--servers FILE)"
    )


def stale_remedy(key: str, server: str | None = None) -> str:
    """What to do about a declared deviation the server no longer shows."""
    table = f"[servers.{server}]" if server else "the server's table"
    return (
        f"drop its declared deviation: remove {key} from deviations in {table} of a servers "
        "file (or from its plugin's Framework entry)"
    )


@dataclass(frozen=True)
class Deviation:
    """One robustness rule a server bends: what was sent, expected and came."""

    check: str  # the check that saw it (`malformed`)
    key: str  # the `deviations` key that declares it (`oversized-headers`)
    sent: str
    expected: str
    came: str
    declared: str | None = None  # the server's own reason, when it declares the deviation

    def __post_init__(self) -> None:
        for name in ("check", "key", "sent", "expected", "came"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "\n" in value:
                raise ValueError(f"deviation {name} must be one line of text, not {value!r}")

    @property
    def warning(self) -> bool:
        """Not declared by the server: a warning (a failure with --strict-verify)."""
        return self.declared is None

    def line(self, server: str | None = None, with_check: bool = True) -> str:
        """The finding in one line (`malformed oversized-headers: sent …; expected …; came
        …; remedy`); a warning ends with the remedy, a declared one with the server's
        reason. `with_check` False: without the check's name (a check's own detail)."""
        named = with_check and self.check != self.key  # `counter`, not `counter counter`
        said = (
            f"{self.check + ' ' if named else ''}{self.key}: sent {self.sent}; "
            f"expected {self.expected}; came {self.came}"
        )
        if self.declared is not None:
            return f"{said}; declared: {self.declared}"
        return f"{said}; {remedy(self.key, server)}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def deviation_from_dict(data: dict[str, Any]) -> Deviation:
    """A Deviation from its run.json form."""
    return Deviation(**data)


@dataclass(frozen=True)
class Outcome:
    """What a check returns when it passed but saw deviations (a plain str otherwise)."""

    detail: str
    deviations: tuple[Deviation, ...] = ()
    figures: Mapping[str, object] = field(default_factory=dict)  # what the check measured


def declared_reason(framework: str, key: str) -> str | None:
    """The server's own reason for bending the rule `key` (its `deviations` entry), if it
    declares it."""
    info = FRAMEWORKS.get(framework)
    return None if info is None else info.deviations.get(key)


def judge_rule(
    check: str,
    key: str,
    held: bool,
    *,
    sent: str,
    expected: str,
    came: str,
    framework: str = "",
    declared: str | None = None,
) -> Deviation | None:
    """One robustness rule of `check`: None when it held, else the Deviation (declared when
    `framework` declares `key`, or `declared` gives the reason). A rule declared bent that
    held fails the check, so a declaration cannot go stale."""
    reason = declared if declared is not None else declared_reason(framework, key)
    if held and reason is not None:
        raise CheckFailed(
            sent=sent,
            expected=f"the deviation it declares ({reason})",
            came=f"{came}, as the rule asks",
            remedy=stale_remedy(key, framework or None),
        )
    if held:
        return None
    return Deviation(check, key, one_line(sent), one_line(expected), one_line(came), reason)


def with_deviations(detail: str, deviations: Iterable[Deviation | None]) -> str | Outcome:
    """What a check returns: `detail` alone when no rule was bent, else an Outcome carrying
    the deviations, the detail naming them (warnings, then declared ones)."""
    seen = tuple(d for d in deviations if d is not None)
    if not seen:
        return detail
    warned = [d.key for d in seen if d.warning]
    declared = [d.key for d in seen if not d.warning]
    if warned:
        detail += f"; deviating: {', '.join(warned)}"
    if declared:
        detail += f"; declared deviations: {', '.join(declared)}"
    return Outcome(detail, seen)

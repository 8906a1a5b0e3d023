"""The one naming rule of every temporary directory the harness, its drivers and its
servers make: `serverbench-<kind>-<owner pid>-<owner start time>-<random>`.

The owner is the process that made it; its start time (whole seconds since the epoch, as
the kernel tells psutil) tells it apart from a later process that got the same pid. A
directory whose owner is gone was left by a process killed before it could clean up
(SIGKILL, the OOM killer, a power cut): `harness doctor` lists those and `harness clean`
removes them (harness.services.leftovers). Lives in `servers` because everything may import it:
the harness, the drivers and the nginx wrapper.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

PREFIX = "serverbench-"
# kind: lower-case words joined by "-" (none starts with a digit), then pid and start time
NAME_PATTERN = re.compile(
    r"^serverbench-(?P<kind>[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*)-(?P<pid>\d+)-(?P<started>\d+)-"
)
KIND_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z][a-z0-9]*)*$")


@dataclass(frozen=True)
class Owner:
    """The process a temporary directory belongs to: its pid and start time (s)."""

    pid: int
    started: int

    def alive(self) -> bool:
        """Whether that very process still runs (not another one given its pid since)."""
        try:
            process = psutil.Process(self.pid)
            return (
                abs(int(process.create_time()) - self.started) <= 1
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False


def this_owner() -> Owner:
    """This process, as the owner of the directories it makes."""
    pid = os.getpid()  # asked each time: a forked worker is an owner of its own
    return Owner(pid, int(psutil.Process(pid).create_time()))


def prefix(kind: str) -> str:
    """The name prefix of a directory of `kind` made by this process; ValueError names a
    kind that does not fit NAME_PATTERN."""
    if not KIND_PATTERN.match(kind):
        raise ValueError(f"a temporary directory's kind is lower-case words joined by -: {kind!r}")
    owner = this_owner()
    return f"{PREFIX}{kind}-{owner.pid}-{owner.started}-"


def mkdtemp(kind: str, dir: Path | str | None = None) -> Path:
    """tempfile.mkdtemp with the harness's name (mode 0700); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix(kind), dir=dir))


def temporary_directory(
    kind: str,
    dir: Path | str | None = None,
) -> tempfile.TemporaryDirectory[str]:
    """tempfile.TemporaryDirectory with the harness's name: removed on cleanup."""
    return tempfile.TemporaryDirectory(prefix=prefix(kind), dir=dir)


def parse_name(name: str) -> tuple[str, Owner] | None:
    """The kind and owner a directory's name records, or None for a name not ours."""
    match = NAME_PATTERN.match(name)
    if match is None:
        return None
    return match["kind"], Owner(int(match["pid"]), int(match["started"]))

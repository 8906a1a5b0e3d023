"""What a killed run leaves: its temporary directories, and the services still running
from them.

Every temporary directory is named by servers.scratch (`serverbench-<kind>-<owner pid>-
<owner start>-…`). One whose owner no longer runs was left by a process killed before it
could clean up: a PostgreSQL cluster, a file sink's records, an nginx config, a fleet
host's folder, certificates. A process whose working directory or command line lies in
such a directory (PostgreSQL and its backends, FerretDB, memcached) belongs to it.
`harness doctor` lists them (`find_leftovers`); `harness clean` stops those processes,
SIGTERM then SIGKILL, and removes the directories (`clean_leftovers`). A directory whose
owner runs is never touched: another run's, in progress.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil

from model.files import cache_dir
from servers import scratch

STOP_GRACE_S = 5.0  # for a left-over service to obey SIGTERM before SIGKILL


@dataclass(frozen=True)
class Leftover:
    """A temporary directory of a dead owner: its kind, owner, size and the processes
    still running from it (pid, command line)."""

    path: Path
    kind: str
    owner_pid: int
    size_bytes: int
    processes: tuple[tuple[int, str], ...] = ()

    def record(self) -> dict[str, object]:
        """As `harness doctor --json` and `harness clean --json` print it."""
        return {
            "path": str(self.path),
            "kind": self.kind,
            "owner_pid": self.owner_pid,
            "size_bytes": self.size_bytes,
            "processes": [{"pid": pid, "command": command} for pid, command in self.processes],
        }


def tree_bytes(path: Path) -> int:
    """The bytes of every file under `path` (symbolic links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _inside(candidate: str, directory: str) -> bool:
    return candidate == directory or candidate.startswith(directory + os.sep)


def processes_in(directories: list[Path]) -> dict[Path, list[psutil.Process]]:
    """The processes whose working directory, or an argument of whose command line
    (`--state-dir=…` included), lies in one of `directories`."""
    found: dict[Path, list[psutil.Process]] = {directory: [] for directory in directories}
    if not directories:
        return found
    for process in psutil.process_iter(["cmdline", "cwd", "status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        places = [process.info["cwd"] or ""]
        for argument in process.info["cmdline"] or []:
            places += [argument, argument.partition("=")[2]]
        for directory in directories:
            if any(place and _inside(place, str(directory)) for place in places):
                found[directory].append(process)
                break
    return found


def find_leftovers(roots: list[Path] | None = None) -> list[Leftover]:
    """The temporary directories under `roots` (default: the system's temporary
    directory, and the cache where file sets are generated) whose owner is gone, oldest
    owner first."""
    candidates: list[tuple[Path, str, scratch.Owner]] = []
    for root in roots or [Path(tempfile.gettempdir()), cache_dir()]:
        with contextlib.suppress(OSError):
            for entry in root.iterdir():
                parsed = scratch.parse_name(entry.name)
                if parsed is None or not entry.is_dir() or entry.is_symlink():
                    continue
                kind, owner = parsed
                if not owner.alive():
                    candidates.append((entry, kind, owner))
    running = processes_in([path for path, _, _ in candidates])
    leftovers = []
    for path, kind, owner in sorted(candidates, key=lambda c: (c[2].started, str(c[0]))):
        described = []
        for process in running[path]:
            with contextlib.suppress(psutil.Error):
                described.append((process.pid, " ".join(process.cmdline()) or process.name()))
        leftovers.append(Leftover(path, kind, owner.pid, tree_bytes(path), tuple(described)))
    return leftovers


def stop_processes(processes: list[psutil.Process], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM each, SIGKILL what is left after `grace_s` (psutil refuses to signal a
    pid that another process has been given since)."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def clean_leftovers(leftovers: list[Leftover]) -> list[str]:
    """Stop the processes running from each leftover (found again now), then remove its
    directory; what could not be removed (path: why), none when all went."""
    running = processes_in([leftover.path for leftover in leftovers])
    stop_processes([process for processes in running.values() for process in processes])
    problems = []
    for leftover in leftovers:
        try:
            shutil.rmtree(leftover.path)
        except FileNotFoundError:
            continue
        except OSError as error:
            problems.append(f"{leftover.path}: {error.strerror or error}")
    return problems

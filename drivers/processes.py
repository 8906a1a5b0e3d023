"""Every long-lived child the harness starts (servers, load generators, services, nginx)
goes through `spawn`: one place that decides how a child is tied to the harness.

- Its own session (and so its own process group): Ctrl-C at the terminal reaches only the
  harness, which then stops each child in order; `kill_group` ends a child and whatever it
  forked.
- A parent-death signal (Linux `prctl(PR_SET_PDEATHSIG)`, set between fork and exec and
  kept across the exec of `taskset`): if the harness dies without cleaning up (SIGKILL,
  the OOM killer), the kernel signals the child at once, so nothing outlives the harness.
  Children that stop their own children on SIGTERM (servers, nginx) are given SIGTERM;
  the rest SIGKILL.

The signal fires when the *thread* that started the child ends: every child is started
from the harness's main thread.

- Its cgroups (`cgroup_procs`: each hierarchy's `cgroup.procs` file, harness.cgroups): the
  child writes itself into them before it execs, so nothing it runs or forks, not even a
  daemon that leaves its process group, is counted outside them.
- The CPUs the harness had before it pinned itself to the load's CPUs
  (`harness.affinity.harness_pinned`): a child inherits its parent's CPUs, so without this
  a server or load generator the affinity mode leaves unpinned would run on the load's
  CPUs. A child meant to be pinned is pinned by `taskset -c` after that.

This lives in `drivers` (the lowest layer that runs processes) so that drivers and the
harness share it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    # Resolved once here, in the parent: the child between fork and exec only calls it.
    # CDLL(None): the symbols already loaded (libc's among them), no library search.
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: no parent-death signal
        return None


_PRCTL = _load_prctl()
# the CPUs a child starts on while the harness is pinned (None: the harness's own)
_child_cpus: frozenset[int] | None = None
# the cgroup.procs files every load generator joins (a case's load cgroup; (): none)
_load_cgroup_procs: tuple[str, ...] = ()


def set_child_cpus(cpus: frozenset[int] | None) -> None:
    """Children started from now on get `cpus` (None: whatever the harness has)."""
    global _child_cpus
    _child_cpus = cpus


def child_cpus() -> frozenset[int] | None:
    """What `set_child_cpus` last set."""
    return _child_cpus


def set_load_cgroup_procs(procs: Sequence[str]) -> None:
    """Load generators started from now on join the cgroups whose `cgroup.procs` files
    `procs` names (a case's load group, harness.run.case; empty: they join none)."""
    global _load_cgroup_procs
    _load_cgroup_procs = tuple(procs)


def load_cgroup_procs() -> tuple[str, ...]:
    """What `set_load_cgroup_procs` last set."""
    return _load_cgroup_procs


def child_setup(
    signum: int = signal.SIGKILL, cgroup_procs: Sequence[str] = ()
) -> Callable[[], None] | None:
    """A `preexec_fn`: the child joins its cgroups (writes `0`, itself, into each of
    `cgroup_procs`), the kernel sends `signum` to it when the harness dies, and it gets
    the CPUs the harness had before pinning itself (`set_child_cpus`; a cpuset it joined
    narrows them).

    None when there is nothing to do (no prctl, not Linux, and the harness not pinned). If
    the harness already died between fork and prctl, the child signals itself: the race
    leaves nothing behind either. A cgroup the child cannot join is left out (the
    harness checks the child's membership once it runs: harness.cgroups).
    """
    prctl, cpus = _PRCTL, _child_cpus
    procs = [os.fsencode(path) for path in cgroup_procs]  # encoded here, not in the child
    if prctl is None and cpus is None and not procs:
        return None
    parent = os.getpid()

    def set_up_child() -> None:
        for path in procs:  # open, write, close: system calls only
            try:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError:
                pass
        if cpus is not None:  # a system call, as prctl: safe between fork and exec
            os.sched_setaffinity(0, cpus)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signum)

    return set_up_child


class _Child(subprocess.Popen):  # type: ignore[type-arg]
    """Popen that kills what it forked when starting is interrupted: a Ctrl-C or SIGTERM
    raised while Popen waits for the child's exec leaves a running child whose pid nobody
    holds, so nobody else could stop it."""

    def _execute_child(self, *args: Any, **kwargs: Any) -> None:
        try:
            super()._execute_child(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            # `returncode` is set when Popen reaped a child whose exec failed: that pid
            # may be another process's by now
            if getattr(self, "_child_created", False) and self.returncode is None:
                for kill in (os.killpg, os.kill):  # its group once it ran setsid
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
            raise


def spawn(
    command: Sequence[str],
    *,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    cwd: Path | str | None = None,
    death_signal: int = signal.SIGKILL,
    run_as: tuple[int, int] | None = None,
    env: dict[str, str] | None = None,
    cgroup_procs: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start `command` in its own session, tied to the harness by `death_signal`, in the
    cgroups whose `cgroup.procs` files `cgroup_procs` names (joined before it execs).

    stdin is always closed (/dev/null): no child reads the harness's terminal.
    `run_as` (uid, gid) runs it as another user, with no supplementary groups (root only:
    PostgreSQL refuses to run as root). The credentials change before the parent-death
    signal is set, as it must: the kernel clears that signal when they change.
    """
    user, group = run_as if run_as is not None else (None, None)
    return _Child(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=True,
        user=user,
        group=group,
        extra_groups=[] if run_as is not None else None,
        preexec_fn=child_setup(death_signal, cgroup_procs),  # only system calls: safe with threads
    )


def kill_group(process: subprocess.Popen[Any], signum: int = signal.SIGKILL) -> None:
    """Signal the child's whole process group (its session, as `spawn` made it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def signal_name(returncode: int | None) -> str | None:
    """`SIGKILL` for a return code of -9; None when the process was not killed by a signal."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def how_it_ended(returncode: int) -> str:
    """`killed by SIGKILL` or `exited (status 1)`: a finished child's end, in words."""
    killed = signal_name(returncode)
    return f"killed by {killed}" if killed else f"exited (status {returncode})"

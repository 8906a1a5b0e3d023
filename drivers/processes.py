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


def parent_death_signal(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel send `signum` to the child when the harness dies.

    None where prctl is not available (not Linux). If the harness already died between
    fork and prctl, the child signals itself: the race leaves nothing behind either.
    """
    if _PRCTL is None:
        return None
    prctl = _PRCTL
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)

    return set_parent_death_signal


def spawn(
    command: Sequence[str],
    *,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    cwd: Path | str | None = None,
    death_signal: int = signal.SIGKILL,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` in its own session, tied to the harness by `death_signal`.

    stdin is always closed (/dev/null): no child reads the harness's terminal.
    """
    return subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=parent_death_signal(death_signal),  # only prctl: safe with threads
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

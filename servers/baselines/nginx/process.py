"""nginx as a child process: started from a rendered config in a private temporary
directory (`Nginx`, `start_nginx`), judged ready only once it alone listens on its ports
and answers, and stopped gracefully (QUIT, then TERM, then KILL)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from servers import PROGRAM_PATH, contract, listeners, scratch
from servers.baselines.nginx.config import render_config
from servers.listeners import http_answers

READY_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 3  # a port picked free can be taken before nginx binds it: pick again
PORT_TAKEN = "Address already in use"


class NginxError(Exception):
    """nginx is missing, refused its config, or did not answer; the message is one line."""


def nginx_binary() -> str:
    """The nginx executable (it lives in /usr/sbin, often not on a user's PATH)."""
    path = shutil.which("nginx", path=PROGRAM_PATH)
    if path is None:
        raise NginxError("nginx is not installed (harness doctor --install)")
    return path


@dataclass(frozen=True)
class Site:
    """What one start attempt renders: the blocks inside `http {}`, where to probe, and
    every port the blocks listen on (default: the probe's)."""

    blocks: str
    probe_host: str
    probe_port: int
    probe_path: str = "/"
    ports: tuple[int, ...] = ()

    @property
    def listen_ports(self) -> set[int]:
        return set(self.ports or (self.probe_port,))


class Nginx:
    """One nginx master and its workers, from a config in a private temporary directory.

    `cpus` runs it under `taskset -c`; `new_session` puts it in its own process group
    (killed as a group as the last resort) instead of its parent's.
    """

    def __init__(
        self,
        blocks: str,
        *,
        workers: int = 1,
        cpus: str | None = None,
        new_session: bool = False,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        prefix: list[str] = []
        if cpus is not None:
            taskset = shutil.which("taskset", path=PROGRAM_PATH)
            if taskset is None:
                raise NginxError("taskset is not installed (package util-linux)")
            prefix = [taskset, "-c", cpus]
        binary = nginx_binary()
        self.new_session = new_session
        self.run_dir = scratch.mkdtemp("nginx")
        try:
            config = self.run_dir / "nginx.conf"
            config.write_text(render_config(self.run_dir, blocks, workers))
            command = [
                *prefix,
                binary,
                "-p", f"{self.run_dir}/",
                "-c", str(config),
                "-e", str(self.run_dir / "error.log"),  # the log before the config is read
            ]  # fmt: skip
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # nginx writes to error.log; error_tail() shows it
                start_new_session=new_session,
                preexec_fn=preexec_fn,  # the harness's parent-death signal, when it asks
            )
        except BaseException:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            raise

    @property
    def pid(self) -> int:
        """The master's pid (taskset execs nginx, so it is the same process)."""
        return self.process.pid

    def processes(self) -> list[psutil.Process]:
        """The master and its workers (workers sorted by pid); empty once it is gone."""
        try:
            master = psutil.Process(self.process.pid)
            workers = sorted(master.children(), key=lambda p: p.pid)
        except psutil.Error:
            return []
        return [master, *workers]

    def error_tail(self, limit_chars: int = 400) -> str:
        try:
            text = (self.run_dir / "error.log").read_text(errors="replace").strip()
        except OSError:
            return "(no error log)"
        return text[-limit_chars:] if text else "(empty error log)"

    def wait_answering(self, site: Site, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until nginx itself holds a listening socket on every port of `site`, no
        other process listens on one of them, and the probe gets an HTTP answer (nginx
        counts that one request): an answer from another process's listener on a port
        picked free is never taken for nginx's.

        Raises NginxError (with the error log's tail) if nginx exits, stays silent, or
        shares a port with another process (PORT_TAKEN: start_nginx picks new ports).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NginxError(
                    f"nginx exited with status {self.process.returncode}: {self.error_tail()}"
                )
            pids = listeners.tree_pids(self.process.pid)
            if site.listen_ports <= listeners.listening_ports(pids):
                others = listeners.other_listeners(site.listen_ports, pids, root=self.process.pid)
                if others:
                    taken = ", ".join(f"{port} (pid {pid})" for port, pid in others.items())
                    raise NginxError(f"{PORT_TAKEN}: another process listens on {taken}")
                if http_answers(site.probe_host, site.probe_port, site.probe_path):
                    return
            time.sleep(0.05)
        raise NginxError(f"nginx did not answer within {timeout_s:.0f} s: {self.error_tail()}")

    def stop(self, grace_s: float = contract.SHUTDOWN_GRACE_S) -> int | None:
        """QUIT (graceful: finish requests in flight), then TERM, then KILL; remove the dir.

        The whole sequence takes at most `grace_s`; returns nginx's exit status.
        """
        processes = self.processes()
        steps = ((signal.SIGQUIT, 0.8 * grace_s), (signal.SIGTERM, 0.15 * grace_s))
        for signum, wait_s in steps:
            if self.process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(wait_s)
        if self.process.poll() is None:
            self._kill(processes)
            self.process.wait()
        self._kill([p for p in processes[1:] if p.is_running()])  # workers outliving it
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return self.process.returncode

    def _kill(self, processes: list[psutil.Process]) -> None:
        if self.new_session:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.kill()


def start_nginx(
    render: Callable[[], Site],
    *,
    workers: int = 1,
    cpus: str | None = None,
    new_session: bool = False,
    attempts: int = PORT_ATTEMPTS,
    ready_timeout_s: float = READY_TIMEOUT_S,
    preexec_fn: Callable[[], None] | None = None,
) -> tuple[Nginx, Site]:
    """Render, start, and wait until nginx answers; a lost port race renders again.

    `render` picks its ports each time it is called (free_port), so another attempt gets
    fresh ones.
    """
    for attempt in range(attempts):
        site = render()
        nginx = Nginx(
            site.blocks, workers=workers, cpus=cpus, new_session=new_session, preexec_fn=preexec_fn
        )
        try:
            nginx.wait_answering(site, ready_timeout_s)
            return nginx, site
        except NginxError as error:
            log = nginx.error_tail()
            nginx.stop(grace_s=1.0)
            if PORT_TAKEN not in f"{error} {log}" or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")

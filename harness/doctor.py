"""`harness doctor`: which tools and limits this machine has, and installing what is missing."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import shutil
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

import psutil

from drivers.agent.plan import read_port_range
from drivers.base import cargo_root
from harness.connection_plan import ConnectionHost
from harness.install_plan import (
    NODE_MODULES,
    CargoProgress,
    InstallStep,
    install_plan,
    plan_lines,
    step_done,
    step_started,
)
from harness.services.ferretdb import (
    FERRETDB_VERSION,
    build_ferretdb,
    ferretdb_binary,
    known_w0_probe,
    probe_unacknowledged_writes,
)
from harness.services.leftovers import find_leftovers
from harness.tools import TOOLS, Tool, tool_path, tool_status
from model.errors import UserError
from servers import scratch
from servers.plugins import PLUGIN_PROBLEMS

Say = Callable[[str], None]  # told each line of the install's plan and progress


def _quiet(_line: str) -> None:
    """A `say` that prints nothing (callers that want no progress)."""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def host_facts() -> dict[str, object]:
    """Facts that bound what a run can measure here; recorded in every result."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    port_range = _read("/proc/sys/net/ipv4/ip_local_port_range")
    cpu_model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model or platform.processor(),
        "cores": os.cpu_count(),
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "memory_bytes": psutil.virtual_memory().total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nofile_soft": soft,
        "nofile_hard": hard,
        "somaxconn": int(_read("/proc/sys/net/core/somaxconn") or 0),
        "port_range": [int(p) for p in port_range.split()] if port_range else None,
        "tcp_tw_reuse": _read("/proc/sys/net/ipv4/tcp_tw_reuse"),
        "conntrack_max": _read("/proc/sys/net/netfilter/nf_conntrack_max"),
    }


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _conntrack_takes_loopback() -> bool | None:
    """Whether a TCP connection on loopback takes a conntrack entry in this namespace: one
    connection of our own to a listener of our own, the entries counted while it is up
    (the kernel registers conntrack's hooks in a namespace only once a rule needs them,
    so a loaded module alone does not tell). None when it cannot be told."""
    count_path = "/proc/sys/net/netfilter/nf_conntrack_count"
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            listener.settimeout(2.0)
            with (
                socket.create_connection(listener.getsockname(), timeout=2.0),
                listener.accept()[0],
            ):
                count = _int_or_none(_read(count_path))
    except OSError:
        return None
    return None if count is None else count > 0


def connection_host() -> ConnectionHost:
    """This host's facts for `harness plan-connections` (harness.connection_plan): the
    open-files limit, port range, somaxconn, memory, CPUs and conntrack's table."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    memory = psutil.virtual_memory()
    unlimited = resource.RLIM_INFINITY
    conntrack_max = _int_or_none(_read("/proc/sys/net/netfilter/nf_conntrack_max"))
    count = _int_or_none(_read("/proc/sys/net/netfilter/nf_conntrack_count"))
    return ConnectionHost(
        hostname=platform.node(),
        cpu_count=os.cpu_count() or 1,
        open_files=soft if soft != unlimited else 2**20,  # the kernel's nr_open default
        open_files_hard=hard if hard != unlimited else 2**20,
        port_range=read_port_range(),
        somaxconn=_int_or_none(_read("/proc/sys/net/core/somaxconn")) or 0,
        memory_total_bytes=memory.total,
        memory_available_bytes=memory.available,
        conntrack_max=conntrack_max,
        conntrack_count=count,
        # asked only where nothing is tracked now: an entry already says it is
        loopback_tracked=_conntrack_takes_loopback() if conntrack_max and not count else None,
    )


def doctor_report() -> dict[str, object]:
    """Tools (path, version), FerretDB, and host limits, as `harness doctor --json` prints them."""
    binary = ferretdb_binary()
    return {
        "tools": {name: asdict(tool_status(tool)) for name, tool in TOOLS.items()},
        "ferretdb": {
            "path": str(binary) if binary.is_file() else None,
            "version": FERRETDB_VERSION if binary.is_file() else None,
            "w0_probe": known_w0_probe(),
        },
        "host": host_facts(),
        # plugins that raised, exited or hung on import (servers.plugins): left out
        "broken_plugins": list(PLUGIN_PROBLEMS),
        # what killed runs left: `harness clean` removes it (harness.services.leftovers)
        "leftovers": [leftover.record() for leftover in find_leftovers()],
    }


def install_missing(names: list[str] | None = None, say: Say = _quiet) -> list[str]:
    """Install what is missing: Debian packages of the tools (their services neither started
    nor enabled), the tools built with cargo (oha), the Node baselines' packages, then
    FerretDB (built from the Go module proxy) with its w: 0 probe; returns what was
    installed. `say` is told the plan first (harness.install_plan), then each step as it
    starts and ends, with cargo's progress in between."""
    steps = missing_steps(names, say)
    installed: list[str] = []
    for index, step in enumerate(steps, 1):
        say(step_started(index, len(steps), step))
        started_s = time.monotonic()
        if step.kind == "apt":
            installed += _install_packages(names)
        elif step.kind == "cargo":
            install_crate(TOOLS[step.tool], say)
            installed.append(TOOLS[step.tool].package)
        elif step.kind == "npm" and install_node_modules():
            installed.append(NODE_MODULES)
        elif step.kind == "go":
            build_ferretdb()
            installed.append("ferretdb")
        elif step.kind == "probe":
            probe_unacknowledged_writes()
        say(step_done(index, len(steps), step, time.monotonic() - started_s))
    return installed


def missing_steps(names: list[str] | None = None, say: Say = _quiet) -> list[InstallStep]:
    """The install's steps for what is missing here; `say` is told the plan (each tool
    already here, then each step with why and how long)."""
    from servers import NODE_DIR

    wanted = _wanted(names)
    missing = [tool for tool in wanted if tool_path(tool.name) is None]
    steps = install_plan(
        missing,
        node_modules_missing=not (NODE_DIR / "node_modules").is_dir(),
        ferretdb_missing=not ferretdb_binary().is_file(),
        w0_probe_missing=known_w0_probe() is None,
    )
    present = [tool_status(tool) for tool in wanted if tool not in missing]
    for line in plan_lines(steps, present):
        say(line)
    return steps


def install_node_modules() -> bool:
    """`npm ci` the Node baselines' packages (servers/baselines/node/package-lock.json) when
    servers/baselines/node/node_modules is missing; returns whether it installed them."""
    from servers import NODE_DIR

    if (NODE_DIR / "node_modules").is_dir():
        return False
    missing = [program for program in ("node", "npm") if shutil.which(program) is None]
    if missing:
        raise UserError(
            f"{' and '.join(missing)} not found: install Node.js 20 with npm for the node baselines"
        )
    result = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=NODE_DIR,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise UserError(f"npm ci in {NODE_DIR} failed: {result.stderr.strip()[-300:]}")
    return True


def _wanted(names: list[str] | None) -> list[Tool]:
    return [TOOLS[n] for n in (names or list(TOOLS))]


# rustc versions move on; a crate's newest dependencies may ask for a newer one than the
# host has (oha 1.16's do, against rustc 1.95): --locked builds the crate's own lock file.
# Not --quiet: its `Compiling …` lines are the build's progress (harness.install_plan).
CARGO_INSTALL_FLAGS = ("--locked",)
CARGO_TAIL_LINES = 20  # what a failed build's error quotes of cargo's output


def install_crate(tool: Tool, say: Say = _quiet) -> Path:
    """`cargo install <crate> --version V --locked` into the harness's cache (several
    minutes for oha on two cores); returns the binary. Built into a partial directory and
    renamed, so an interrupted build leaves nothing that looks installed, and the build's
    own files go to a temporary target directory, removed after. `say` is told cargo's
    progress, a line every few seconds (harness.install_plan.CargoProgress)."""
    assert tool.crate is not None
    crate, version = tool.crate
    cargo = shutil.which("cargo") or _home_cargo()
    if cargo is None:
        raise UserError(
            f"cargo not found: install Rust (https://rustup.rs) to build {crate} {version}"
        )
    root = cargo_root(crate, version)
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    command = [cargo, "install", crate, "--version", version, *CARGO_INSTALL_FLAGS]
    with scratch.temporary_directory("cargo-build") as target:
        command += ["--root", str(partial), "--target-dir", target]
        returncode, tail = _run_with_progress(command, CargoProgress(time.monotonic()), say)
    if returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(
            f"cargo install {crate} --version {version} failed: {''.join(tail).strip()[-300:]}"
        )
    shutil.rmtree(root, ignore_errors=True)
    partial.replace(root)
    return root / "bin" / tool.name


def _run_with_progress(
    command: list[str], progress: CargoProgress, say: Say
) -> tuple[int, list[str]]:
    """Run `command`, its output (stdout and stderr) read line by line into `progress`;
    its exit status and its last lines."""
    tail: deque[str] = deque(maxlen=CARGO_TAIL_LINES)
    with subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line)
            said = progress.feed(line, time.monotonic())
            if said is not None:
                say(said)
        returncode = process.wait()
    return returncode, list(tail)


def _home_cargo() -> str | None:
    """rustup's cargo when ~/.cargo/bin is not on PATH (a non-login shell, nox)."""
    path = Path.home() / ".cargo" / "bin" / "cargo"
    return str(path) if path.is_file() else None


def _install_packages(names: list[str] | None) -> list[str]:
    wanted = [t for t in _wanted(names) if t.crate is None]  # cargo tools: install_crate
    packages = sorted({t.package for t in wanted if tool_path(t.name) is None})
    if not packages:
        return []
    if shutil.which("apt-get") is None:
        raise UserError(
            f"apt-get not found: install {' '.join(packages)} with your package manager"
        )
    if os.geteuid() != 0:
        raise UserError(f"installing needs root: sudo apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdin=subprocess.DEVNULL)
    enabled_before = enabled_units()
    with services_kept_stopped():
        result = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
    _disable(sorted(enabled_units() - enabled_before))
    if result.returncode != 0:
        raise UserError(
            f"apt-get install {' '.join(packages)} failed: {result.stderr.strip()[-300:]}"
        )
    return packages


# Debian's policy layer: invoke-rc.d and deb-systemd-invoke (what a package's maintainer
# scripts call to start its service) ask /usr/sbin/policy-rc.d first, and exit status 101
# means "action forbidden by policy" (init-system-helpers, README.policy-rc.d).
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
NO_START_POLICY = """#!/bin/sh
# Written by `harness doctor --install` for its apt-get install, removed after it: the
# tools it installs (nginx, memcached, postgresql) are run by the harness, never as
# system services.
exit 101
"""
SYSTEMD_UNIT_DIR = Path("/etc/systemd/system")


@contextlib.contextmanager
def services_kept_stopped() -> Iterator[None]:
    """No package installed meanwhile starts its service (on a systemd host: nginx on
    0.0.0.0:80, memcached, PostgreSQL's `main` cluster on 5432): a policy-rc.d forbidding
    it, unless one is in place already (the administrator's, or a container's own
    `exit 101`), which is left as it is."""
    try:
        fd = os.open(POLICY_RC_D, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    except FileExistsError:
        yield
        return
    try:
        with os.fdopen(fd, "w") as policy:
            policy.write(NO_START_POLICY)
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def enabled_units() -> set[str]:
    """systemd units enabled on this host (a link in a `*.wants` or `*.requires` directory)."""
    links = [*SYSTEMD_UNIT_DIR.glob("*.wants/*"), *SYSTEMD_UNIT_DIR.glob("*.requires/*")]
    return {link.name for link in links if link.is_symlink()}


def _disable(units: list[str]) -> None:
    """Undo what the packages' postinst enabled (policy-rc.d stops a start, not an enable)."""
    systemctl = shutil.which("systemctl")
    if not units or systemctl is None:
        return
    result = subprocess.run(
        [systemctl, "disable", "--quiet", *units],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise UserError(
            f"systemctl disable {' '.join(units)} failed: {result.stderr.strip()[-300:]}"
        )

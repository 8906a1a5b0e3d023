"""Plugins: frameworks a Python package registers through an entry point.

A distribution declares, in its pyproject.toml,

    [project.entry-points."serverbench.frameworks"]
    myservers = "mypackage.bench:frameworks"

where `frameworks` is a callable returning `servers.Framework` entries (or an iterable of
them): the same fields as the builtin registry's. `load_plugins` adds each to
`servers.FRAMEWORKS` with `origin` set to `plugin DIST VERSION`, once per process. A plugin
that fails to load, returns something else, or takes a name already registered is left
out and named in `PLUGIN_PROBLEMS` (`harness list` shows them): one broken package never
stops the rest.

A plugin runs its own code on import, and that code may raise, call `sys.exit` or
`os._exit`, or never return. Every command loads the plugins first (`harness fleet down`
and `harness doctor` too), so each entry point is first loaded in a probe subprocess
(`probe_entry_points`) with a deadline of PLUGIN_LOAD_TIMEOUT_S (the environment's
SERVERBENCH_PLUGIN_TIMEOUT_S overrides it); only those that loaded there are loaded here.
Why a subprocess and not a thread with a deadline: a thread stuck in an import can be
neither stopped nor joined, keeps the module's import lock, and a busy loop in it would
share the CPU with the measurements; a child process is killed, and `os._exit` in it ends
only it. The probe costs one interpreter start per command (a few tens of ms).

An entry point is loaded once by its value: the same `module:attr` declared by two
distributions (an editable install beside a test's copy) registers its entries once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence

from servers import FRAMEWORKS, Framework, register

ENTRY_POINT_GROUP = "serverbench.frameworks"
PLUGIN_LOAD_TIMEOUT_S = 10.0  # for one entry point to load in the probe
TIMEOUT_ENV = "SERVERBENCH_PLUGIN_TIMEOUT_S"
# The probe: the parent's sys.path, then each entry point loaded in turn, a JSON line
# before and after each on a private copy of stdout (a plugin's own prints go to stderr).
PROBE_SCRIPT = (
    "import json, os, sys\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    "out = os.fdopen(os.dup(1), 'w')\n"
    "os.dup2(2, 1)\n"
    "from servers.plugins import probe_main\n"
    "probe_main(sys.argv[2:], out)\n"
)
# "entry point name: what went wrong", for every plugin left out
PLUGIN_PROBLEMS: list[str] = []
_loaded: set[str] = set()  # entry point values already loaded in this process


def _entries(loaded: object) -> list[Framework]:
    """What an entry point's object gives: a callable's result, or the object itself."""
    value = loaded() if callable(loaded) else loaded
    if isinstance(value, Framework):
        return [value]
    if not isinstance(value, Iterable):
        raise TypeError(f"gave {type(value).__name__}, not Framework entries")
    entries = list(value)
    wrong = [type(e).__name__ for e in entries if not isinstance(e, Framework)]
    if wrong:
        raise TypeError(f"gave {', '.join(sorted(set(wrong)))}, not Framework entries")
    return entries


def _problem(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def probe_main(specs: Sequence[str], out: object) -> None:
    """The probe subprocess's work: load each `name=module:attr` entry point and take its
    entries, writing `{"start": value}` before and `{"done": value, "problem": …}` after."""

    def say(record: dict[str, object]) -> None:
        print(json.dumps(record), file=out, flush=True)  # type: ignore[call-overload]

    for spec in specs:
        name, _, value = spec.partition("=")
        say({"start": value})
        try:
            _entries(importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP).load())
            problem = None
        except BaseException as error:  # sys.exit and KeyboardInterrupt too: reported
            problem = _problem(error)
        say({"done": value, "problem": problem})


def load_timeout_s() -> float:
    """PLUGIN_LOAD_TIMEOUT_S, or the environment's SERVERBENCH_PLUGIN_TIMEOUT_S."""
    try:
        return max(0.1, float(os.environ.get(TIMEOUT_ENV, PLUGIN_LOAD_TIMEOUT_S)))
    except ValueError:
        return PLUGIN_LOAD_TIMEOUT_S


def _probe_once(
    specs: Sequence[str], timeout_s: float
) -> tuple[dict[str, str | None], str | None, str]:
    """One probe subprocess over `specs`: what each finished one said (value -> problem or
    None), the value it was loading when it stopped answering or ended (None: none), and
    how it stopped."""
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE_SCRIPT, json.dumps(sys.path), *specs],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # one group to kill: whatever a plugin started goes too
        text=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    finished: dict[str, str | None] = {}
    current: str | None = None
    how = ""
    try:
        while len(finished) < len(specs):
            try:
                line = lines.get(timeout=timeout_s)
            except queue.Empty:
                how = f"hung on import: no answer within {timeout_s:g} s"
                break
            if line is None:
                how = f"ended the process on import (exit status {process.wait()})"
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "start" in record:
                current = record["start"]
            elif "done" in record:
                finished[record["done"]] = record["problem"]
                current = None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
    return finished, current, how


def probe_entry_points(
    entry_points: Sequence[importlib.metadata.EntryPoint], timeout_s: float | None = None
) -> dict[str, str | None]:
    """Load each entry point in a probe subprocess (the module docstring says why): its
    value -> None when it loaded and gave Framework entries, else what went wrong (an
    exception, `sys.exit`, the process ended, or no answer within `timeout_s`)."""
    timeout_s = load_timeout_s() if timeout_s is None else timeout_s
    results: dict[str, str | None] = {}
    pending = [f"{entry.name}={entry.value}" for entry in entry_points]
    while pending:
        finished, current, how = _probe_once(pending, timeout_s)
        results.update(finished)
        if current is not None:
            results[current] = how
        elif len(finished) < len(pending):  # the probe itself failed before any plugin
            for spec in pending:
                results.setdefault(spec.partition("=")[2], f"the plugin probe {how}")
        pending = [spec for spec in pending if spec.partition("=")[2] not in results]
    return results


def load_plugins() -> list[str]:
    """Register every installed plugin's frameworks (once); the names added now. Each is
    probed first (`probe_entry_points`): one that raises, exits or hangs is named in
    PLUGIN_PROBLEMS and never imported here."""
    added: list[str] = []
    entry_points = [
        entry_point
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if entry_point.value not in _loaded
    ]
    probed = probe_entry_points(entry_points) if entry_points else {}
    for entry_point in entry_points:
        if entry_point.value in _loaded:
            continue
        _loaded.add(entry_point.value)
        dist = entry_point.dist
        origin = f"plugin {dist.name} {dist.version}" if dist is not None else "plugin"
        problem = probed.get(entry_point.value)
        if problem is not None:
            PLUGIN_PROBLEMS.append(f"{entry_point.name} ({origin}): {problem}")
            continue
        try:
            entries = _entries(entry_point.load())
        except (Exception, SystemExit) as error:  # a broken plugin is reported, never fatal
            PLUGIN_PROBLEMS.append(f"{entry_point.name} ({origin}): {_problem(error)}")
            continue
        for entry in entries:
            try:
                register(dataclasses.replace(entry, origin=origin))
            except ValueError as error:
                PLUGIN_PROBLEMS.append(f"{entry_point.name}: {error}")
                continue
            added.append(entry.name)
    return added


def plugin_names() -> list[str]:
    """The registered frameworks that came from plugins."""
    return [name for name, f in FRAMEWORKS.items() if f.origin.startswith("plugin")]

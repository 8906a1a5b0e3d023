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

An entry point is loaded once by its value: the same `module:attr` declared by two
distributions (an editable install beside a test's copy) registers its entries once.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Iterable

from servers import FRAMEWORKS, Framework, register

ENTRY_POINT_GROUP = "serverbench.frameworks"
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


def load_plugins() -> list[str]:
    """Register every installed plugin's frameworks (once); the names added now."""
    added: list[str] = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.value in _loaded:
            continue
        _loaded.add(entry_point.value)
        dist = entry_point.dist
        origin = f"plugin {dist.name} {dist.version}" if dist is not None else "plugin"
        try:
            entries = _entries(entry_point.load())
        except Exception as error:  # a broken plugin is reported, never fatal
            PLUGIN_PROBLEMS.append(
                f"{entry_point.name} ({origin}): {type(error).__name__}: {error}"
            )
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

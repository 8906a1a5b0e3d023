"""Framework servers behind one wire contract (see servers/contract.py).

The registry is an explicit dict. Framework modules are imported only by the server
process that runs them (gevent and eventlet monkey-patch at import), never by the harness.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    """One server implementation: its module and the distributions it needs."""

    name: str
    module: str
    distributions: tuple[str, ...]
    loops: tuple[str, ...]  # event loops it can run on; the first is the default
    sinks: tuple[str, ...] = ("empty",)  # the sinks it implements so far

    def missing(self) -> list[str]:
        """Distributions that are not installed (empty when the server can run)."""
        return [d for d in self.distributions if _version(d) is None]

    def available(self) -> bool:
        return not self.missing()

    def versions(self) -> dict[str, str]:
        """Installed versions of the distributions it needs (and of uvloop when usable)."""
        names = self.distributions + (("uvloop",) if "uvloop" in self.loops else ())
        found = {name: _version(name) for name in names}
        return {name: v for name, v in found.items() if v is not None}

    def usable_loops(self) -> tuple[str, ...]:
        return tuple(
            loop for loop in self.loops if loop != "uvloop" or _version("uvloop") is not None
        )


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework(
            "gevent",
            "servers.gevent_server",
            ("gevent", "wsproto", "pymongo"),
            ("gevent",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "eventlet",
            "servers.eventlet_server",
            ("eventlet", "wsproto", "pymongo"),
            ("eventlet",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "tornado",
            "servers.tornado_server",
            ("tornado", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "twisted",
            "servers.twisted_server",
            ("twisted", "autobahn", "pymongo"),
            ("epoll",),
            ("empty", "file", "mongo"),
        ),
        Framework(
            "aiohttp",
            "servers.aiohttp_server",
            ("aiohttp", "pymongo"),
            ("asyncio", "uvloop"),
            ("empty", "file", "mongo"),
        ),
    )
}

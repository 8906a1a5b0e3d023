"""Sinks: where `/log` records and `/ws` messages go.

Only the `empty` sink exists so far; `file` and `mongo` come with their framework idioms
(see the sinks issue). Asking for them fails at start with a one-line error.
"""

from __future__ import annotations

from typing import Any

from servers.common import ServerState
from servers.contract import ServerOptions


class EmptySink:
    """Counts and drops: the cost of the request path without any storage."""

    def __init__(self, state: ServerState) -> None:
        self._state = state

    def store(self, record: dict[str, Any]) -> None:
        """Accept one record; it is 'stored' at once."""
        self._state.stored += 1

    def close(self) -> None:
        """Nothing buffered, nothing to flush."""


def open_empty_sink(options: ServerOptions, state: ServerState) -> EmptySink:
    """The sink for `options`; only `empty` is available yet."""
    if options.sink != "empty":
        raise SystemExit(
            f"servers: the {options.sink!r} sink is not available yet; use --sink empty"
        )
    return EmptySink(state)

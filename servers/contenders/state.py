"""The one ServerState of a contender's worker process: the app counts requests and
records in it, and a server hook (uvicorn's protocol, gunicorn's worker) counts
connections in it, where the server lets one."""

from __future__ import annotations

import os

from servers.core.state import ServerState

_state: ServerState | None = None


def _forget_in_child() -> None:
    # a server that forks its workers after importing the app (gunicorn) gives each a
    # state of its own: counters per process, and records' ids carrying the worker's pid
    global _state
    _state = None


os.register_at_fork(after_in_child=_forget_in_child)


def process_state() -> ServerState:
    """This process's state, made on first use in it."""
    global _state
    if _state is None:
        _state = ServerState(os.environ.get("SERVERBENCH_FRAMEWORK", "contender"), "", 0)
    return _state

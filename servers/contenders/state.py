"""The one ServerState of a contender's worker process: the app counts requests and
records in it, and a server hook (uvicorn's protocol, gunicorn's worker) counts
connections in it, where the server lets one."""

from __future__ import annotations

import os

from servers.core.state import ServerState

_state: ServerState | None = None
_pid = 0


def process_state() -> ServerState:
    """This process's state, made on first use in it (a server that forks its workers
    after the import gives each its own: the records' ids carry the worker's pid)."""
    global _state, _pid
    if _state is None or _pid != os.getpid():
        _state = ServerState(os.environ.get("SERVERBENCH_FRAMEWORK", "contender"), "", 0)
        _pid = os.getpid()
    return _state

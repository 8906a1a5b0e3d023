"""Which event loop an asyncio server runs on: asyncio's own or uvloop's."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_on_asyncio(loop: str | None, main: Coroutine[Any, Any, None]) -> None:
    """Run an asyncio server's main coroutine on asyncio's loop or uvloop's."""
    if loop == "uvloop":
        import uvloop

        loop_factory = uvloop.new_event_loop
    else:
        loop_factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main)

"""Running an asyncio server: on asyncio's own loop or uvloop's, until a signal."""

from __future__ import annotations

import asyncio
import signal
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


async def until_stopped() -> None:
    """Return once SIGTERM or SIGINT arrived (the contract's two ways to stop a server)."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await stopping.wait()

"""asyncio (aiohttp, tornado): protocols and coroutines on asyncio's loop or uvloop's."""

"""How much one event-loop turn may take on: shared by the runtimes that can bound it.

A loop that hands out every ready socket in one turn runs every connection's close before
any timer when thousands close together (a client killed, a load host lost): the close
storm, where the tick probe measured that one turn. Bounding the ready sockets
a turn takes runs the storm in batches with the timers (the tick, telemetry, the sinks'
flushes) between them.
"""

from __future__ import annotations

# Ready sockets one loop turn handles, at most (asyncio's selector, Twisted's reactor).
# Level-triggered epoll hands those left over to the next turns, oldest first (the
# kernel's ready list is a queue), so none is starved; a few hundred a turn keep the
# loop's own work per turn (one epoll_wait, the timers) negligible beside the sockets'.
# Measured, 3,000 idle WebSocket connections closed at once on the busy 2-core machine:
# see servers.runtimes.asyncio.loop and servers.frameworks.twisted for each figure.
READY_SOCKETS_PER_TURN = 256

"""How every server spends the contract's shutdown grace (SIGTERM or SIGINT: exit 0 within
`contract.SHUTDOWN_GRACE_S`).

First the connections, for at most `CONNECTIONS_GRACE_S`: stop accepting, send each open
WebSocket a 1001 with `WS_SHUTDOWN_REASON`, close idle keep-alive connections, let the
requests under way finish (then close theirs). Whatever is still open after that, the
process closes. Then the sink and the backends, within `servers.core.sinks.CLOSE_TIMEOUT_S`:
the writes and inserts in flight, the file or client closed. Both fit inside the grace, with
room for the last telemetry line.
"""

from __future__ import annotations

from servers import contract

CONNECTIONS_GRACE_S = contract.SHUTDOWN_GRACE_S / 2
# The close reason of the 1001 every open WebSocket gets.
WS_SHUTDOWN_REASON = "server shutdown"

"""servers/core/shutdown.py: the shutdown's budget fits the contract's grace."""

from __future__ import annotations

from servers import contract
from servers.core.shutdown import CONNECTIONS_GRACE_S
from servers.core.sinks import CLOSE_TIMEOUT_S


def test_the_connections_and_then_the_sink_finish_within_the_grace() -> None:
    assert CONNECTIONS_GRACE_S > 0
    assert CONNECTIONS_GRACE_S + CLOSE_TIMEOUT_S < contract.SHUTDOWN_GRACE_S

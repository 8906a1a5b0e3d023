"""What the Site keeps for its connections, HTTP/1.1 channels and HTTP/2 connections alike:
each is counted open and closed in the server's state, and held in `channels` so that a
shutdown can drain them (`close_when_idle`)."""

from __future__ import annotations

from typing import Any, Protocol

from servers.core.state import ServerState


class ServingSite(Protocol):
    """The ContractSite as its connections see it (servers.frameworks.twisted.site)."""

    state: ServerState
    channels: set[Any]
    draining: bool
    timeOut: float  # the head deadline: each channel's first timer period
    body_timeout_s: float


def connection_opened(site: ServingSite, channel: Any) -> None:
    """Count `channel` open and keep it for the drain."""
    site.state.connection_opened()
    site.channels.add(channel)


def connection_closed(site: ServingSite, channel: Any) -> None:
    """Count `channel` closed; the drain no longer waits for it."""
    site.state.connection_closed()
    site.channels.discard(channel)

"""The `/ws` rules every server judges alike: which handshakes are refused, which messages close."""

from __future__ import annotations

import json

from servers import contract


def websocket_close_code(message: str | bytes) -> int | None:
    """The close code a WebSocket message earns, or None when it is a valid JSON object.

    Size is checked by each framework's own frame limit; this only judges content.
    """
    if isinstance(message, bytes):
        return contract.WS_CLOSE_UNSUPPORTED_DATA
    try:
        value = json.loads(message)
    except ValueError:
        return contract.WS_CLOSE_INVALID_PAYLOAD
    if not isinstance(value, dict):
        return contract.WS_CLOSE_INVALID_PAYLOAD
    return None


def websocket_handshake_status(origin: str | None, offered_protocols: str | None) -> int | None:
    """The HTTP status refusing a `/ws` handshake, or None when it may proceed.

    `offered_protocols` is the raw Sec-WebSocket-Protocol header (comma separated).
    """
    if origin != contract.WS_ORIGIN:
        return contract.WS_BAD_ORIGIN_STATUS
    offered = [p.strip() for p in (offered_protocols or "").split(",")]
    if contract.WS_SUBPROTOCOL not in offered:
        return contract.WS_NO_SUBPROTOCOL_STATUS
    return None

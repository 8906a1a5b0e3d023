"""What every server does with a whole message a client sent on `/ws`.

The rule, once: a valid JSON object counts in `messages` and becomes one sink record; a
sink whose queue is full (contract.WS_SINK_MAX_PENDING) refuses it and the connection
closes with 1013 (the sink counts that in `sink_errors`, not in `bad`); anything else counts
in `bad` and closes with the code `websocket_close_code` gives it (1003 binary, 1007 not a
JSON object). Each runtime only hands the message over and closes in its own idiom.
"""

from __future__ import annotations

from servers import contract
from servers.core.sinks import Sink
from servers.core.state import ServerState
from servers.core.websocket import websocket_close_code


def take_message(state: ServerState, sink: Sink, message: str | bytes) -> int | None:
    """Judge, count and store one whole client message (text as `str`, binary as `bytes`).

    Returns the close code the connection earns, or None when it reads on.
    """
    close_code = websocket_close_code(message)
    if close_code is not None:
        state.bad += 1
        return close_code
    assert isinstance(message, str)  # bytes always earn 1003 above
    state.messages += 1
    record = state.make_record(
        contract.WEBSOCKET_RECORD_METHOD, contract.ROUTE_WEBSOCKET, {}, message
    )
    if sink.store(record):
        return None
    return contract.WS_CLOSE_TRY_AGAIN_LATER

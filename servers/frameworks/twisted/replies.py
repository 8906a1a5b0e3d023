"""The contract's replies in twisted.web's terms: content types as bytes, the lengths of the
fixed bodies, and one way to answer a request whose handler returned NOT_DONE_YET."""

from __future__ import annotations

from twisted.web.server import Request

from servers import contract

TEXT_CONTENT_TYPE = contract.TEXT_CONTENT_TYPE.encode()
JSON_CONTENT_TYPE = contract.JSON_CONTENT_TYPE.encode()
MC_CONTENT_TYPE = contract.MC_CONTENT_TYPE.encode()
LOG_REPLY_LENGTH = b"%d" % len(contract.LOG_REPLY_BODY)
SINK_UNAVAILABLE_LENGTH = b"%d" % len(contract.SINK_UNAVAILABLE_BODY)
NOT_FOUND_LENGTH = b"%d" % len(contract.NOT_FOUND_BODY)
BACKEND_UNAVAILABLE_LENGTH = b"%d" % len(contract.BACKEND_UNAVAILABLE_BODY)


def reply(
    request: Request,
    code: int,
    body: bytes,
    length: bytes,
    content_type: bytes = TEXT_CONTENT_TYPE,
) -> None:
    """Answer a request later (from a Deferred's callback), unless its client left."""
    if request._disconnected:  # the client left (or shutdown closed it) meanwhile
        return
    request.setResponseCode(code)
    request.setHeader(b"content-type", content_type)
    request.setHeader(b"content-length", length)
    request.write(body)
    request.finish()


def not_found(request: Request) -> bytes:
    """The contract's 404, as a render method returns it."""
    request.setResponseCode(404)
    request.setHeader(b"content-type", TEXT_CONTENT_TYPE)
    return contract.NOT_FOUND_BODY

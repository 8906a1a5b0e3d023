"""The Site every protocol serves: its first channel (HTTP/1.1 or HTTP/2 from the start),
ALPN, the deadlines its channels read, and the drain on shutdown."""

from __future__ import annotations

from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from servers import contract
from servers.core.state import ServerState
from servers.core.tls import alpn_protocols
from servers.frameworks.twisted.h1 import ContractChannel, ContractRequest
from servers.frameworks.twisted.h2 import ContractH2Connection


class ContractSite(Site):
    """The Site: no access log, connection counting, and a drain for shutdown."""

    protocol = ContractChannel
    requestFactory = ContractRequest

    def __init__(
        self,
        resource: Resource,
        state: ServerState,
        head_timeout_s: float,
        body_timeout_s: float,
        protocol: str = contract.PROTOCOL_H1,
    ) -> None:
        # /log reads the raw body; parsing form uploads into request.args is wasted work.
        # `timeout` is each channel's first timer period: the head deadline.
        super().__init__(resource, parsePOSTFormSubmission=False, timeout=head_timeout_s)
        if protocol in (contract.PROTOCOL_H2, contract.PROTOCOL_H2C):
            self.protocol = ContractH2Connection  # HTTP/2 from each connection's start
        self.alpn = (
            [name.encode() for name in alpn_protocols(protocol)]
            if protocol in contract.TLS_PROTOCOLS
            else []
        )
        self.state = state
        self.body_timeout_s = body_timeout_s
        self.channels: set[ContractChannel | ContractH2Connection] = set()
        self.draining = False

    def acceptableProtocols(self) -> list[bytes]:
        """What TLS offers by ALPN (Twisted asks the factory): the case's protocol only.

        Site's own answer is h2 and http/1.1 whenever the h2 package is installed."""
        return self.alpn

    def log(self, request: Request) -> None:
        """No access log: formatting a line per request costs a large share of GET /."""

    def drain(self) -> None:
        """Close idle keep-alive connections; busy ones close after their response."""
        self.draining = True
        for channel in list(self.channels):
            channel.close_when_idle()

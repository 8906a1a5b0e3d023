"""How a check reaches a server: its base URL, the case's protocol, and the CA it trusts.

`open_connection` is the one connection factory every raw check uses (TCP, wrapped in TLS
for the TLS protocols) and `http_client` the one httpx client (HTTP/1.1, over TLS, or
HTTP/2: ALPN h2, or cleartext with prior knowledge for h2c). A check given a plain URL
string reaches it as today: cleartext HTTP/1.1 (or HTTP/1.1 over TLS for `https://`,
trusting the system's CAs).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from harness.tls import Certificates
from servers import contract

if TYPE_CHECKING:
    from harness.verify.severity import Outcome

H2_PROTOCOLS = (contract.PROTOCOL_H2, contract.PROTOCOL_H2C)


@dataclass(frozen=True)
class Endpoint:
    """A server as the checks reach it."""

    base_url: str  # http://HOST:PORT, or https:// for the TLS protocols
    protocol: str = contract.PROTOCOL_H1  # servers.contract.PROTOCOLS
    # what a TLS client trusts: the run's CA (a user's own certificate: itself, its host
    # name unchecked); None: the system's CAs
    certificates: Certificates | None = None

    def __post_init__(self) -> None:
        if self.protocol not in contract.PROTOCOLS:
            raise ValueError(
                f"protocol {self.protocol!r} is not one of {', '.join(contract.PROTOCOLS)}"
            )
        scheme = "https" if self.tls else "http"
        if httpx.URL(self.base_url).scheme != scheme:
            raise ValueError(f"protocol {self.protocol} is reached at {scheme}://, not {self}")

    def __str__(self) -> str:
        return self.base_url

    @property
    def tls(self) -> bool:
        """Whether the server speaks TLS on its port."""
        return self.protocol in contract.TLS_PROTOCOLS

    @property
    def h2(self) -> bool:
        """Whether the case speaks HTTP/2 (over TLS or cleartext)."""
        return self.protocol in H2_PROTOCOLS

    @property
    def host(self) -> str:
        return httpx.URL(self.base_url).host

    @property
    def port(self) -> int:
        url = httpx.URL(self.base_url)
        return url.port or (443 if url.scheme == "https" else 80)

    def ssl_context(self, alpn: Sequence[str] | None = None) -> ssl.SSLContext:
        """A client context: TLS 1.3 at least (the contract's), trusting the run's CA (as
        harness.tls.client_context does), offering `alpn` (by default the case's own)."""
        trusted = self.certificates
        context = ssl.create_default_context(
            cafile=str(trusted.ca_path or trusted.cert_path) if trusted is not None else None
        )
        if trusted is not None and trusted.ca_path is None:  # a user's certificate
            context.check_hostname = False
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        # a server that closes without close_notify has closed: an empty read, not an error
        context.options |= ssl.OP_IGNORE_UNEXPECTED_EOF
        if alpn is None:
            alpn = [contract.ALPN_FOR_PROTOCOL[self.protocol]] if self.tls else []
        if alpn:
            context.set_alpn_protocols(list(alpn))
        return context


EndpointOrUrl = Endpoint | str
# A check: the server in, what was seen out — its detail, or an Outcome when it held with
# deviations (harness.verify.severity); it raises CheckFailed (or a client library's
# error) when the property does not hold.
CheckFunction = Callable[[EndpointOrUrl], "str | Outcome"]


def endpoint_of(target: EndpointOrUrl) -> Endpoint:
    """`target` as an Endpoint: a URL string is HTTP/1.1 (over TLS for https://)."""
    if isinstance(target, Endpoint):
        return target
    scheme = httpx.URL(target).scheme
    return Endpoint(target, contract.PROTOCOL_H1_TLS if scheme == "https" else contract.PROTOCOL_H1)


def endpoint_for(
    server_url: str, protocol: str, certificates: Certificates | None = None
) -> Endpoint:
    """The Endpoint of a server started for `protocol` at `server_url` (https:// for the
    TLS protocols, whichever scheme `server_url` was written with)."""
    if protocol in contract.TLS_PROTOCOLS and server_url.startswith("http://"):
        server_url = "https://" + server_url.removeprefix("http://")
    return Endpoint(server_url, protocol, certificates)


def open_connection(
    target: EndpointOrUrl, timeout_s: float = 5.0, alpn: Sequence[str] | None = None
) -> socket.socket:
    """The one connection factory: a TCP connection to the server, and for a TLS protocol
    the TLS handshake done on it (the CA trusted, `alpn` offered: by default the case's)."""
    endpoint = endpoint_of(target)
    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    if not endpoint.tls:
        return sock
    try:
        return endpoint.ssl_context(alpn).wrap_socket(sock, server_hostname=endpoint.host)
    except BaseException:
        sock.close()
        raise


def http_client(target: EndpointOrUrl, timeout_s: float = 5.0) -> httpx.Client:
    """An httpx client speaking the case's protocol to the server (HTTP/2 only for h2 and
    h2c: a server that answers in HTTP/1.1 fails the check)."""
    endpoint = endpoint_of(target)
    verify: ssl.SSLContext | bool = endpoint.ssl_context() if endpoint.tls else True
    return httpx.Client(
        base_url=endpoint.base_url,
        timeout=timeout_s,
        verify=verify,
        http1=not endpoint.h2,
        http2=endpoint.h2,
    )

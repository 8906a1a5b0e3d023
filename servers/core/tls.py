"""TLS for the Python servers: one server context, the same on every runtime.

Each framework hands this `ssl.SSLContext` to its own TLS idiom (gevent's and eventlet's
wrapped listener, tornado's `ssl_options`, Twisted's `CertificateOptions` made from it,
aiohttp's `ssl_context`), so every Python server offers the same TLS: version 1.3 only
(`servers.contract.TLS_MINIMUM_VERSION`), the certificate the harness gave, and ALPN
limited to the case's protocol, so a client cannot quietly fall back to another one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servers.contract import ALPN_FOR_PROTOCOL, ServerOptions

if TYPE_CHECKING:
    import ssl


class CertificateError(ValueError):
    """The certificate or key of a TLS case does not load (python -m servers: one line).

    Defined without importing `ssl`: `servers.__main__` catches it, and gevent must patch
    `ssl` before anything imports it (`server_context` imports it when called).
    """


def alpn_protocols(protocol: str) -> list[str]:
    """The ALPN identifiers a server speaking `protocol` offers: exactly the case's one."""
    return [ALPN_FOR_PROTOCOL[protocol]]


def server_context(options: ServerOptions) -> ssl.SSLContext:
    """A TLS 1.3 server context with the options' certificate and the case's ALPN.

    CertificateError names the files when the certificate or key does not load or does
    not match.
    """
    import ssl  # here, not at import: see CertificateError

    if not options.tls or options.tls_cert is None or options.tls_key is None:
        raise ValueError(f"protocol {options.protocol} is not a TLS protocol")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    try:
        context.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as error:
        raise CertificateError(
            f"TLS certificate {options.tls_cert} with key {options.tls_key}: {error}"
        ) from None
    context.set_alpn_protocols(alpn_protocols(options.protocol))
    return context

"""TLS on Twisted: `CertificateOptions` offering what servers.core.tls's context offers.

Twisted's TLS is pyOpenSSL's, not the `ssl` module's, so the `ssl.SSLContext` of
servers.core.tls cannot be handed over as it is; these options are made from the same
files and the same rules (TLS 1.3 at least; ALPN exactly the case's protocol, which the
Site names: servers.frameworks.twisted). That context is still built first, so a
certificate that does not load or does not match its key is refused with the very same
message as on every other Python server.

A listener is wrapped as `reactor.listenSSL` wraps one (`TLSMemoryBIOFactory` around the
site): the handshake then runs inside the connection, under the HTTP channel's own timer.
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from OpenSSL import crypto
from twisted.internet.ssl import CertificateOptions, KeyPair, TLSVersion
from twisted.protocols.tls import TLSMemoryBIOFactory

from servers.contract import ServerOptions
from servers.core.tls import server_context


def certificate_options(options: ServerOptions) -> CertificateOptions:
    """The options' certificate chain and key, TLS 1.3 minimum.

    ALPN is not set here: Twisted offers what the wrapped factory's `acceptableProtocols`
    names (the Site's: exactly the case's protocol) joined with any given here.

    CertificateError names the files when they do not load (servers.core.tls).
    """
    server_context(options)  # the shared checks and their message
    assert options.tls_cert is not None and options.tls_key is not None
    with open(options.tls_cert, "rb") as cert_file:
        chain = x509.load_pem_x509_certificates(cert_file.read())
    with open(options.tls_key, "rb") as key_file:
        key = KeyPair.load(key_file.read(), crypto.FILETYPE_PEM)
    return CertificateOptions(
        privateKey=key.original,
        certificate=crypto.X509.from_cryptography(chain[0]),
        extraCertChain=[crypto.X509.from_cryptography(extra) for extra in chain[1:]],
        raiseMinimumTo=TLSVersion.TLSv1_3,
    )


def tls_factory(options: ServerOptions, factory: Any) -> TLSMemoryBIOFactory:
    """`factory` (a Site) behind TLS, as `reactor.listenSSL` would serve it."""
    return TLSMemoryBIOFactory(certificate_options(options), False, factory)

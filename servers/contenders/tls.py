"""The contract's TLS rules for the contenders' stock servers, where a command-line flag
cannot say them: TLS 1.3 at least and ALPN exactly the case's protocol, as
servers.core.tls gives our own servers.

Each is the server's own documented hook, loaded with its own `-c python:...` option:

- gunicorn: `ssl_context(conf, default_ssl_context_factory)`, the server hook gunicorn
  calls for the listener's context (`-c python:servers.contenders.tls`; it reads only the
  setting names it knows, so the hypercorn classes below are nothing to it).
- hypercorn: a configuration object per TLS protocol (`-c python:servers.contenders.tls.H1TLS`)
  naming its `alpn_protocols`; hypercorn's context refuses TLS 1.1 and older, not 1.2,
  and has no setting for that (its deviation: servers.contenders).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any, ClassVar

from servers.contract import ALPN_FOR_PROTOCOL, PROTOCOL_H1_TLS, PROTOCOL_H2


def ssl_context(conf: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]):
    """gunicorn's hook: its own context (the certificate files; ALPN `h2` alone when its
    `http_protocols` is h2, the h2 case), TLS 1.3 at least, and ALPN `http/1.1` for
    HTTP/1.1 (gunicorn offers none then)."""
    context = default_ssl_context_factory()
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    if "h2" not in getattr(conf, "http_protocols", ()):  # gunicorn before 27: HTTP/1.1
        context.set_alpn_protocols([ALPN_FOR_PROTOCOL[PROTOCOL_H1_TLS]])
    return context


class H1TLS:
    """hypercorn over h1-tls: ALPN offers HTTP/1.1 only."""

    alpn_protocols: ClassVar[list[str]] = [ALPN_FOR_PROTOCOL[PROTOCOL_H1_TLS]]


class H2:
    """hypercorn over h2: ALPN offers HTTP/2 only."""

    alpn_protocols: ClassVar[list[str]] = [ALPN_FOR_PROTOCOL[PROTOCOL_H2]]

"""hypercorn on the contract's ASGI app (servers.contenders.asgi), for verify's TLS and
HTTP/2 tests: `python -m tests.hypercorn_server --fd N --protocol P [--tls-cert C
--tls-key K] [--client-timeout-s S] [--stock-tls]`.

It listens on a socket the test bound on loopback and handed over (`--fd`), so no port is
guessed. Over TLS it serves the contract's one server context (servers.core.tls: TLS 1.3
only, ALPN exactly the case's protocol) unless `--stock-tls`, which keeps hypercorn's own
(TLS 1.2 allowed, ALPN h2 and http/1.1): a server the TLS checks must fail. The TLS
handshake is held to `--client-timeout-s`, as the contract's head deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl

from hypercorn.asyncio import serve
from hypercorn.config import Config

from servers.contenders.asgi import app
from servers.contract import PROTOCOLS, ServerOptions
from servers.core.tls import server_context


class ContractConfig(Config):
    """hypercorn's configuration with the contract's TLS context."""

    options: ServerOptions | None = None

    def create_ssl_context(self) -> ssl.SSLContext | None:
        if self.options is None or not self.options.tls:
            return super().create_ssl_context()
        return server_context(self.options)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--protocol", choices=PROTOCOLS, default="h1")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--client-timeout-s", type=float, default=10.0)
    parser.add_argument("--stock-tls", action="store_true")
    args = parser.parse_args()
    config = ContractConfig()
    config.bind = [f"fd://{args.fd}"]
    config.accesslog = None
    config.errorlog = None  # hostile input makes hypercorn log tracebacks: not the test's
    config.ssl_handshake_timeout = args.client_timeout_s
    config.keep_alive_timeout = args.client_timeout_s
    config.graceful_timeout = 1.0
    if args.tls_cert:
        config.certfile, config.keyfile = args.tls_cert, args.tls_key
        if not args.stock_tls:
            config.options = ServerOptions(
                "hypercorn",
                protocol=args.protocol,
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
            )
    stop = asyncio.Event()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]

    asyncio.run(run())


if __name__ == "__main__":
    main()

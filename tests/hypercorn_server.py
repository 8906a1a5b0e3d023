"""hypercorn on the contract's ASGI app (servers.contenders.asgi), for verify's TLS and
HTTP/2 tests: `python -m tests.hypercorn_server --fd N --protocol P [--tls-cert C
--tls-key K] [--client-timeout-s S] [--stock-tls]`, started by `running_hypercorn`.

It listens on a socket the test bound on loopback and handed over (`--fd`), so no port is
guessed. Over TLS it serves the contract's one server context (servers.core.tls: TLS 1.3
only, ALPN exactly the case's protocol) unless `--stock-tls`, which keeps hypercorn's own
(TLS 1.2 allowed, ALPN h2 and http/1.1): a server the TLS checks must fail. The TLS
handshake is held to `--client-timeout-s`, as the contract's head deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from hypercorn.asyncio import serve
from hypercorn.config import Config

from harness.tls import Certificates, h2c_answers, tls_handshakes
from harness.verify import Endpoint, endpoint_for
from servers.contenders.asgi import app
from servers.contract import PROTOCOL_H2C, PROTOCOLS, TLS_PROTOCOLS, ServerOptions
from servers.core.tls import server_context

READY_S = 20.0


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


def _answers(port: int, protocol: str, certificates: Certificates | None) -> bool:
    if protocol in TLS_PROTOCOLS:
        assert certificates is not None
        return tls_handshakes("127.0.0.1", port, protocol, certificates)
    if protocol == PROTOCOL_H2C:
        return h2c_answers("127.0.0.1", port)
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock.recv(16).startswith(b"HTTP/1.1 ")
    return False


@contextlib.contextmanager
def running_hypercorn(
    protocol: str,
    certificates: Certificates | None = None,
    client_timeout_s: float = 1.0,
    stock_tls: bool = False,
) -> Iterator[Endpoint]:
    """hypercorn speaking `protocol` on a loopback port the OS chose, until the block ends:
    the Endpoint the checks reach it at (trusting `certificates`' CA)."""
    command = [sys.executable, "-m", "tests.hypercorn_server"]
    command += ["--protocol", protocol, "--client-timeout-s", str(client_timeout_s)]
    if protocol in TLS_PROTOCOLS:
        assert certificates is not None
        command += ["--tls-cert", str(certificates.cert_path)]
        command += ["--tls-key", str(certificates.key_path)]
    if stock_tls:
        command.append("--stock-tls")
    # stderr to a file, not a pipe: hostile input makes hypercorn log tracebacks
    with socket.socket() as listener, tempfile.TemporaryFile() as stderr_file:
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        process = subprocess.Popen(
            [*command, "--fd", str(listener.fileno())],
            pass_fds=[listener.fileno()],
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
        )
        listener.close()
        try:
            deadline = time.monotonic() + READY_S
            while not _answers(port, protocol, certificates):
                if process.poll() is not None:
                    stderr_file.seek(0)
                    raise AssertionError(f"hypercorn exited: {stderr_file.read()[-2000:]!r}")
                assert time.monotonic() < deadline, f"hypercorn did not answer in {READY_S} s"
                time.sleep(0.1)
            yield endpoint_for(f"http://127.0.0.1:{port}", protocol, certificates)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()

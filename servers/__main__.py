"""`python -m servers NAME --port P ...`: run one framework server behind the wire contract.

This process opens the listening socket(s) itself, so every framework gets the same
socket options (TCP_NODELAY, which accepted sockets inherit on Linux; SO_REUSEPORT for
workers; the same backlog), and `--port 0` works for any worker count. With `--workers N`
it forks N workers, each with its own SO_REUSEPORT socket on the same port and its own
telemetry line, and it forwards SIGTERM/SIGINT to them. A worker that dies unasked stops
the server: the supervisor names it on stderr, stops the others and exits 1 (a server
quietly answering with fewer workers would measure something else). Workers die with
the supervisor (a parent-death signal), so no worker outlives it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import socket
import sys

from servers import FRAMEWORKS, PROGRAM_PATH, contract
from servers.contract import (
    MONGO_URL_ENV,
    PROTOCOL_H1,
    PROTOCOLS,
    SINKS,
    ServerOptions,
)
from servers.core.state import ServerState
from servers.core.tls import CertificateError
from servers.frameworks import Worker
from servers.workers import open_listeners, supervise


def argument_parser() -> argparse.ArgumentParser:
    """The contract's command line: every option a server takes (docs/contract.md)."""
    parser = argparse.ArgumentParser(prog="python -m servers", description=__doc__)
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: the OS chooses (see telemetry)")
    parser.add_argument("--sink", choices=SINKS, default="empty")
    parser.add_argument("--sink-path")
    parser.add_argument(
        "--mongo-url",
        help=f"the MongoDB (default: ${MONGO_URL_ENV}, which keeps a password off `ps`)",
    )
    parser.add_argument("--mongo-w", type=int, choices=(0, 1), default=1)
    parser.add_argument("--mongo-db", default=ServerOptions.mongo_db, help="the database")
    parser.add_argument(
        "--mongo-batch",
        type=int,
        default=ServerOptions.mongo_batch,
        help="records per insert_many, at most (1: one insert per record)",
    )
    parser.add_argument("--durable", action="store_true", help="fsync / j: true per batch")
    parser.add_argument("--files-dir")
    parser.add_argument("--memcached", metavar="HOST:PORT")
    parser.add_argument("--mc-socket-port", type=int)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--loop", help="event loop for aiohttp and tornado: asyncio|uvloop")
    parser.add_argument(
        "--client-timeout-s",
        type=float,
        help="both slow-client deadlines (default: head 10 s, body 30 s; docs/contract.md)",
    )
    parser.add_argument(
        "--write-timeout-s",
        type=float,
        help="the mongo sink's write deadline, in (0, 10] (default: 10 s; docs/contract.md)",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default=PROTOCOL_H1,
        help="h1 (cleartext HTTP/1.1), h1-tls, h2 (over TLS, ALPN), h2c (prior knowledge)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain (h1-tls, h2)")
    parser.add_argument("--tls-key", help="PEM private key (h1-tls, h2)")
    return parser


def parse_options(argv: list[str]) -> ServerOptions:
    """The contract's command line, as ServerOptions; a bad value exits with one line."""
    parser = argument_parser()
    args = parser.parse_args(argv)
    framework = FRAMEWORKS[args.framework]
    loop = args.loop or framework.loops[0]
    if loop not in framework.loops:
        parser.error(f"{args.framework} runs on {', '.join(framework.loops)}, not {loop!r}")
    if args.protocol not in framework.protocols:
        parser.error(
            f"{args.framework} does not speak {args.protocol}: {framework.why_not(args.protocol)}"
        )
    if loop not in framework.usable_loops():
        parser.error(f"loop {loop!r} is not installed (pip install {loop})")
    try:
        return ServerOptions(
            framework=args.framework,
            host=args.host,
            port=args.port,
            sink=args.sink,
            sink_path=args.sink_path,
            mongo_url=args.mongo_url or os.environ.get(MONGO_URL_ENV) or None,
            mongo_w=args.mongo_w,
            mongo_db=args.mongo_db,
            mongo_batch=args.mongo_batch,
            durable=args.durable,
            files_dir=args.files_dir,
            memcached=args.memcached,
            mc_socket_port=args.mc_socket_port,
            workers=args.workers,
            loop=loop,
            client_timeout_s=args.client_timeout_s,
            write_timeout_s=args.write_timeout_s,
            protocol=args.protocol,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        )
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits


def run_worker(
    options: ServerOptions,
    listener: socket.socket,
    worker: int,
    mc_listener: socket.socket | None = None,
) -> None:
    """Import the framework (gevent/eventlet patch here) and serve until SIGTERM.

    `mc_listener` is the memcached socket service's listening socket (`--mc-socket-port`).
    """
    module = importlib.import_module(FRAMEWORKS[options.framework].module)
    state = ServerState(options.framework, options.loop or "", worker)
    state.port = listener.getsockname()[1]
    if mc_listener is not None:
        state.mc_port = mc_listener.getsockname()[1]
    try:
        module.serve(Worker(options, listener, state, mc_listener))
    except CertificateError as error:  # a bad --tls-cert/--tls-key: one line, exit 1
        raise SystemExit(f"servers: {error}") from None


def exec_program(options: ServerOptions, argv: list[str]) -> None:
    """Replace this process by a non-Python server (Node, Ruby) given the same arguments."""
    framework = FRAMEWORKS[options.framework]
    program = shutil.which(framework.programs[0], path=PROGRAM_PATH)
    if program is None:
        raise SystemExit(f"servers: {framework.programs[0]} is not installed")
    sys.stdout.flush()
    # the boards' workloads' payloads, written once in servers/contract.py
    os.environ[contract.WORKLOADS_ENV] = json.dumps(contract.workload_values())
    os.execv(program, [program, framework.module, *argv])


def main(argv: list[str] | None = None) -> int:
    from servers.plugins import load_plugins

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in FRAMEWORKS:  # a builtin needs no plugin, nor their probe
        load_plugins()  # a plugin's python-kind server runs here too
    options = parse_options(argv)
    kind = FRAMEWORKS[options.framework].kind
    if kind in ("node", "ruby"):
        exec_program(options, argv)
    if kind == "nginx":
        from servers.baselines import nginx

        return nginx.main(options)
    try:
        listeners = open_listeners(options.host, options.port, options.workers)
        mc_listeners: list[socket.socket | None] = [None] * options.workers
        if options.mc_socket_port is not None:
            mc_listeners = list(
                open_listeners(options.host, options.mc_socket_port, options.workers)
            )
    except OSError as error:
        print(f"servers: cannot listen on {options.host}: {error}", file=sys.stderr)
        return 1
    if options.workers == 1:
        run_worker(options, listeners[0], 0, mc_listeners[0])
        return 0
    return supervise(
        [[listener, mc] for listener, mc in zip(listeners, mc_listeners, strict=True)],
        lambda worker: run_worker(options, listeners[worker], worker, mc_listeners[worker]),
    )


if __name__ == "__main__":
    sys.exit(main())

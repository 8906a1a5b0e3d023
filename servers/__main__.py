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
import contextlib
import importlib
import os
import shutil
import signal
import socket
import sys

from servers import FRAMEWORKS, PROGRAM_PATH
from servers.contract import (
    LISTEN_BACKLOG,
    MONGO_URL_ENV,
    PROTOCOL_H1,
    PROTOCOLS,
    SINKS,
    ServerOptions,
)
from servers.core.state import ServerState
from servers.core.tls import CertificateError
from servers.frameworks import Worker


def parse_options(argv: list[str]) -> ServerOptions:
    """The contract's command line, as ServerOptions; a bad value exits with one line."""
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
        "--protocol",
        choices=PROTOCOLS,
        default=PROTOCOL_H1,
        help="h1 (cleartext HTTP/1.1), h1-tls, h2 (over TLS, ALPN), h2c (prior knowledge)",
    )
    parser.add_argument("--tls-cert", help="PEM certificate chain (h1-tls, h2)")
    parser.add_argument("--tls-key", help="PEM private key (h1-tls, h2)")
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
            protocol=args.protocol,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        )
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits


def open_listeners(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` listening sockets on one port (SO_REUSEPORT when more than one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listeners: list[socket.socket] = []
    for _ in range(count):
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if count > 1:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Inherited by accepted sockets: no 40 ms delayed-ACK stalls (docs/contract.md).
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind((host, port))
        listener.listen(LISTEN_BACKLOG)
        port = listener.getsockname()[1]
        listeners.append(listener)
    return listeners


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


def _die_with_parent(parent: int, signum: int = signal.SIGTERM) -> None:
    """Have the kernel send `signum` to this process when `parent` dies (Linux prctl)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # not Linux: no such signal
        ctypes.CDLL(None).prctl(1, int(signum), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the prctl
        os.kill(os.getpid(), signum)


def supervise(
    options: ServerOptions,
    listeners: list[socket.socket],
    mc_listeners: list[socket.socket | None],
) -> int:
    """Fork one worker per listener; forward SIGTERM/SIGINT; exit 0 when all exit 0.

    A worker that ends before a stop was asked for (killed, crashed, or exited) ends the
    server at once: the others are stopped and the exit status is 1.
    """
    supervisor = os.getpid()
    running: dict[int, int] = {}  # pid → worker index
    for worker, listener in enumerate(listeners):
        pid = os.fork()
        if pid == 0:
            _die_with_parent(supervisor)
            mine = {listener, mc_listeners[worker]}
            for other in [*listeners, *mc_listeners]:
                if other is not None and other not in mine:
                    other.close()
            code = 0
            try:
                run_worker(options, listener, worker, mc_listeners[worker])
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
                if not isinstance(stop.code, int) and stop.code is not None:
                    print(stop.code, file=sys.stderr)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                os._exit(code)
        running[pid] = worker
    for listener in [*listeners, *mc_listeners]:
        if listener is not None:
            listener.close()
    stopping = False

    def stop_workers(signum: int) -> None:
        for child in list(running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signum)

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        stop_workers(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    worst = 0
    while running:
        try:
            pid, status = os.wait()  # whichever worker ends first, at once
        except ChildProcessError:
            break
        worker = running.pop(pid, None)
        if worker is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, int(code != 0))
        if not stopping:
            stopping, worst = True, 1
            how = (
                f"was killed by {signal.Signals(-code).name}"
                if code < 0
                else f"exited with status {code}"
            )
            print(
                f"servers: worker {worker} (pid {pid}) {how}: stopping the other workers",
                file=sys.stderr,
                flush=True,
            )
            stop_workers(signal.SIGTERM)
    return worst


def exec_program(options: ServerOptions, argv: list[str]) -> None:
    """Replace this process by a non-Python server (Node, Ruby) given the same arguments."""
    framework = FRAMEWORKS[options.framework]
    program = shutil.which(framework.programs[0], path=PROGRAM_PATH)
    if program is None:
        raise SystemExit(f"servers: {framework.programs[0]} is not installed")
    sys.stdout.flush()
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
    return supervise(options, listeners, mc_listeners)


if __name__ == "__main__":
    sys.exit(main())

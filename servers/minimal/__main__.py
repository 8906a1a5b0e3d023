"""`python -m servers.minimal NAME --port P [--ws [--workers N]]`: run one framework's
minimal app (with --ws: its minimal WebSocket server; with --workers N, N processes of it
on one port, as our servers' workers: servers.workers — the way past one process's
open-file limit, Node's through its cluster module)."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys

from servers import FRAMEWORKS, PROGRAM_PATH
from servers.minimal import WEBSOCKET_MINIMALS
from servers.workers import open_listeners, supervise


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m servers.minimal")
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0: the OS picks")
    parser.add_argument("--ws", action="store_true", help="the minimal WebSocket server")
    parser.add_argument(
        "--workers", type=int, default=1, help="with --ws: processes on the port (SO_REUSEPORT)"
    )
    args = parser.parse_args()
    if args.workers < 1 or (args.workers > 1 and not args.ws):
        parser.error("--workers N: N ≥ 1, and more than one only with --ws")
    if not args.ws:
        importlib.import_module(f"servers.minimal.{args.framework}_app").run(args.host, args.port)
        return
    target = WEBSOCKET_MINIMALS.get(args.framework)
    if target is None:
        parser.error(f"no minimal WebSocket server for {args.framework} "
                     f"(there is one for {', '.join(WEBSOCKET_MINIMALS)})")  # fmt: skip
    if target.endswith(".js"):  # Node: this process becomes node on the script
        node = shutil.which("node", path=PROGRAM_PATH)
        if node is None:
            raise SystemExit("servers.minimal: node is not installed")
        sys.stdout.flush()
        os.execv(
            node,
            [node, target, "--host", args.host, "--port", str(args.port),
             "--workers", str(args.workers)],
        )  # fmt: skip
    if args.workers == 1:
        importlib.import_module(target).run(args.host, args.port)
        return
    # the sockets before the fork, the framework imported (patching) in each worker
    listeners = open_listeners(args.host, args.port, args.workers)
    sys.exit(
        supervise(
            [[listener] for listener in listeners],
            lambda worker: importlib.import_module(target).serve(listeners[worker]),
        )
    )


if __name__ == "__main__":
    main()

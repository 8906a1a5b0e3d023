"""`python -m servers.minimal NAME --port P [--ws]`: run one framework's minimal app (with
--ws: its minimal WebSocket server)."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys

from servers import FRAMEWORKS, PROGRAM_PATH
from servers.minimal import WEBSOCKET_MINIMALS


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m servers.minimal")
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="0: the OS picks")
    parser.add_argument("--ws", action="store_true", help="the minimal WebSocket server")
    args = parser.parse_args()
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
        os.execv(node, [node, target, "--host", args.host, "--port", str(args.port)])
    importlib.import_module(target).run(args.host, args.port)


if __name__ == "__main__":
    main()

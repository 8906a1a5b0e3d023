"""`python -m servers.minimal NAME --port P`: run one framework's minimal hello-world app."""

from __future__ import annotations

import argparse
import importlib

from servers import FRAMEWORKS


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m servers.minimal")
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    importlib.import_module(f"servers.minimal.{args.framework}_app").run(args.host, args.port)


if __name__ == "__main__":
    main()

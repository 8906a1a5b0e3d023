"""How a contender's app learns the contract's options: environment variables, set by its
command (`env NAME={placeholder} ... uvicorn ...`), since a stock server's command line
has no room for an app's own options. The MongoDB URL is not among them: the harness gives
every server it in contract.MONGO_URL_ENV itself, keeping a password off the command line."""

from __future__ import annotations

import os

from servers.contract import MONGO_URL_ENV, ServerOptions

# variable -> the placeholder (servers.PLACEHOLDERS) its command sets it from
ENVIRONMENT = {
    "SERVERBENCH_SINK": "sink",
    "SERVERBENCH_SINK_PATH": "sink_path",
    "SERVERBENCH_MONGO_DB": "mongo_db",
    "SERVERBENCH_MONGO_W": "mongo_w",
    "SERVERBENCH_MONGO_BATCH": "mongo_batch",
    "SERVERBENCH_DURABLE": "durable",
}


def options_from_environment() -> ServerOptions:
    """The sink options this process was started with (the empty sink when none)."""
    env = os.environ
    return ServerOptions(
        framework=env.get("SERVERBENCH_FRAMEWORK", "contender"),
        sink=env.get("SERVERBENCH_SINK") or "empty",
        sink_path=env.get("SERVERBENCH_SINK_PATH") or None,
        mongo_url=env.get(MONGO_URL_ENV) or None,
        mongo_db=env.get("SERVERBENCH_MONGO_DB") or ServerOptions.mongo_db,
        mongo_w=int(env.get("SERVERBENCH_MONGO_W") or 1),
        mongo_batch=int(env.get("SERVERBENCH_MONGO_BATCH") or ServerOptions.mongo_batch),
        durable=env.get("SERVERBENCH_DURABLE") == "1",
    )

"""The server a verification starts and stops: the options it is started with (its
sink's, its backends', a short client deadline) and the checks of its own life (its
telemetry lines, its stop on SIGTERM)."""

from __future__ import annotations

from harness.services.backends import Backends
from harness.services.sink_store import SinkStore
from harness.verify.results import NO_TELEMETRY, Check, check_telemetry, stopped_cleanly
from servers import FRAMEWORKS


def server_args(
    framework: str,
    store: SinkStore,
    backends: Backends | None,
    mongo_db: str,
    client_timeout_s: float | None,
) -> list[str]:
    """The contract options `framework` is started with to be verified: its sink's, its
    backends' (GridFS loaded into the sink's database when the sink is mongo: one
    --mongo-url), and --client-timeout-s when given to a contract server."""
    args = store.server_args()
    if backends is not None:
        if store.sink == "mongo":  # one --mongo-url: GridFS goes into the sink's database too
            backends.load_gridfs_into(str(store.mongo_url), mongo_db)
        args += backends.server_args(args)
    if client_timeout_s is not None and FRAMEWORKS[framework].telemetry:
        args += ["--client-timeout-s", str(client_timeout_s)]
    return args


def life_checks(
    framework: str, exit_status: int, telemetry: list[dict[str, object]]
) -> tuple[Check, Check]:
    """The checks of a stopped server's life: its telemetry lines (a contract server's
    own; a command writes none) and a clean stop on SIGTERM."""
    contract_server = FRAMEWORKS[framework].telemetry
    lines = (
        check_telemetry(telemetry)
        if contract_server
        else Check("telemetry", True, NO_TELEMETRY, supported=False)
    )
    return lines, Check("sigterm", *stopped_cleanly(exit_status, contract_server))

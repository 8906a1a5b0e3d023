"""The backend checks (`/files`, `/gridfs`, `/mc` and the memcached socket service), the
routes each needs, and the backends verify starts once for every server it checks."""

from __future__ import annotations

from pathlib import Path

from harness.services.backends import KINDS, Backends
from harness.services.fileset import FileSet
from harness.verify.endpoint import CheckFunction
from harness.verify.files import (
    VERIFY_FILE_COUNT,
    check_escapes,
    check_file_route,
    plant_escape_bait,
)
from harness.verify.http import Routes, routes_of
from harness.verify.memcached import check_memcached_route, check_memcached_socket
from servers import FRAMEWORKS, contract

BACKEND_CHECK_ROUTES = {
    "files": contract.ROUTE_FILES_PREFIX,
    "files-escapes": contract.ROUTE_FILES_PREFIX,
    "gridfs": contract.ROUTE_GRIDFS_PREFIX,
    "gridfs-escapes": contract.ROUTE_GRIDFS_PREFIX,
    "memcached": contract.ROUTE_MEMCACHED_PREFIX,
    "memcached-socket": contract.ROUTE_MEMCACHED_PREFIX,
}


def verify_backends(
    workdir: Path, mongo_url: str | None = None, mongo_db: str = contract.GRIDFS_DATABASE
) -> Backends:
    """A small file set on disk and in GridFS (database `mongo_db`), and memcached with the
    memcached-proxy study's value: what the `/files`, `/gridfs` and `/mc` checks need,
    started once for every server verified."""
    backends = Backends(
        KINDS,
        mongo_url=mongo_url,
        mongo_db=mongo_db,
        file_count=VERIFY_FILE_COUNT,
        files_dir=workdir / "files",
    )
    if backends.fileset is not None:
        plant_escape_bait(backends.fileset.directory)
    return backends


def backend_checks(fileset: FileSet | None, mc_port: int) -> dict[str, CheckFunction]:
    """The checks of `/files`, `/gridfs`, `/mc` and the memcached socket service."""
    if fileset is None:
        return {}
    return {
        "files": lambda url: check_file_route(url, fileset, contract.ROUTE_FILES_PREFIX),
        "files-escapes": lambda url: check_escapes(url, fileset, contract.ROUTE_FILES_PREFIX),
        "gridfs": lambda url: check_file_route(url, fileset, contract.ROUTE_GRIDFS_PREFIX),
        "gridfs-escapes": lambda url: check_escapes(url, fileset, contract.ROUTE_GRIDFS_PREFIX),
        "memcached": check_memcached_route,
        "memcached-socket": lambda url: check_memcached_socket(url, mc_port),
    }


def served_backend_checks(
    framework: str, fileset: FileSet | None, mc_port: int, routes: Routes | None = None
) -> dict[str, CheckFunction]:
    """The backend checks of the backend routes `framework` serves (no socket service
    check for a command server: it has none)."""
    served = routes_of(framework, routes)
    telemetry = FRAMEWORKS[framework].telemetry
    return {
        name: check
        for name, check in backend_checks(fileset, mc_port).items()
        if BACKEND_CHECK_ROUTES[name] in served and (telemetry or name != "memcached-socket")
    }

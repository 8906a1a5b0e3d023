"""Fixtures: real server processes on OS-chosen loopback ports, one per framework."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harness.server_process import ServerProcess, start_server
from servers import FRAMEWORKS


def require_framework(name: str) -> None:
    """Skip a framework that is not installed, except in CI where every one must be."""
    missing = FRAMEWORKS[name].missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed in CI: missing {', '.join(missing)}")
        pytest.skip(f"{name} not installed: missing {', '.join(missing)}")


@pytest.fixture(params=sorted(FRAMEWORKS), scope="module")
def framework(request: pytest.FixtureRequest) -> str:
    require_framework(request.param)
    return request.param


@pytest.fixture(scope="module")
def server(framework: str) -> Iterator[ServerProcess]:
    """One running server per framework, shared by a module's read-only tests."""
    process = start_server(framework)
    yield process
    status = process.stop()
    assert status == 0, f"{framework} exited {status}: {process.stderr_tail()}"

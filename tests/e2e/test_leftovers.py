"""What a kill leaves, and what cannot block the harness (issue 22, items 7 and 8).

Real processes only: memcached as the harness starts it, a `--server` command that
daemonizes itself out of the harness's process group, the temporary directories and
services of a run killed with SIGKILL (`harness doctor` lists them, `harness clean`
removes them), and plugins that raise, exit or hang on import.
"""

from __future__ import annotations

import psutil

from harness.services import Memcached
from tests.helpers import require_tool


def test_memcached_never_runs_as_root() -> None:
    require_tool("memcached")
    with Memcached() as memcached:
        process = psutil.Process(memcached.process.pid)
        assert process.uids().effective != 0, process.cmdline()
        assert process.uids().real != 0, process.cmdline()

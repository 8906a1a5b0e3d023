"""What a load host is (run on the host itself): cores, limits, addresses, tools, and the
harness version it runs — the fleet refuses a host whose version differs from ours.

The version is the package's plus a fingerprint of the code a load host runs (model,
drivers, harness): two checkouts of one release that differ in a driver are told apart.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import os
import platform
import resource
import socket
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import psutil

from drivers.agent.plan import read_port_range

FINGERPRINTED_PACKAGES = ("model", "drivers", "harness")


@functools.cache
def harness_version() -> str:
    """`0.1.0+src.1a2b3c4d5e6f`: the package version and a hash of its Python sources."""
    try:
        release = version("serverbench-harness")
    except PackageNotFoundError:
        release = "unknown"
    root = Path(__file__).resolve().parents[2]
    digest = hashlib.sha256()
    for package in FINGERPRINTED_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return f"{release}+src.{digest.hexdigest()[:12]}"


def host_addresses() -> list[str]:
    """This host's IPv4 addresses other than loopback: where its load connects from."""
    found = []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if (
                address.family == socket.AF_INET
                and not ipaddress.ip_address(address.address).is_loopback
            ):
                found.append(address.address)
    return sorted(found, key=ipaddress.ip_address)


def load_host_facts() -> dict[str, Any]:
    """What `harness fleet status` lists for a host, and what a step is planned with."""
    from harness.tools import TOOLS, tool_status  # runs each tool once: only asked here

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    tools = {name: tool_status(TOOLS[name]).version for name in ("wrk", "taskset")}
    tools["python"] = platform.python_version()
    return {
        "hostname": platform.node(),
        "cores": len(os.sched_getaffinity(0)),
        "nofile_soft": soft,
        "port_range": list(read_port_range()),
        "addresses": host_addresses(),
        "memory_bytes": psutil.virtual_memory().total,
        "python_executable": sys.executable,  # what runs the agents there
        "tools": tools,
        "harness": harness_version(),
    }

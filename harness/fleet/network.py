"""A local fleet's network: one namespace per load host (`harness-fleet-<i>`), joined to
this machine by a veth pair (`hfleet<i>h` on the bridge `hfleet0`, `hfleet<i>n` inside)
with addresses of its own from 198.51.100.0/24 (TEST-NET-2, RFC 5737: never routed, no
one's private network), and each namespace's ephemeral port range FLEET_PORT_RANGE. Made
and removed with iproute2; found again by name (the prefixes)."""

from __future__ import annotations

import ipaddress
import subprocess
import time

from model.errors import UserError

NAMESPACE_PREFIX = "harness-fleet-"
LINK_PREFIX = "hfleet"
BRIDGE = "hfleet0"
NETWORK = ipaddress.ip_network("198.51.100.0/24")  # TEST-NET-2: documentation only
BRIDGE_ADDRESS = "198.51.100.1"
# Each load host's ephemeral ports: all but the well-known ones (nothing else binds in our
# namespaces), so an address gives connect() 32,256 even ports rather than 14,116
# (drivers.agent.plan.connect_ports)
FLEET_PORT_RANGE = (1024, 65535)
FIRST_HOST_ADDRESS = 10  # 198.51.100.10 onwards: the hosts' addresses


def host_addresses(index: int, per_host: int) -> list[str]:
    """Host `index`'s addresses (1-based): 198.51.100.10.. for host 1, then onwards."""
    first = int(NETWORK.network_address) + FIRST_HOST_ADDRESS + (index - 1) * per_host
    addresses = [ipaddress.ip_address(first + k) for k in range(per_host)]
    if addresses[-1] not in NETWORK or addresses[-1] == NETWORK.broadcast_address:
        raise UserError(f"{index} hosts of {per_host} addresses do not fit in {NETWORK}")
    return [str(a) for a in addresses]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS` (iproute2); with `check`, a UserError naming it when it fails."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise UserError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def our_namespaces() -> list[str]:
    """The network namespaces of a local fleet (named with NAMESPACE_PREFIX)."""
    output = ip("netns", "list", check=False).stdout
    names = [line.split()[0] for line in output.splitlines() if line.strip()]
    return [name for name in names if name.startswith(NAMESPACE_PREFIX)]


def our_links() -> list[str]:
    """The links of a local fleet (named with LINK_PREFIX): the bridge and veths."""
    output = ip("-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in output.splitlines()]
    return [name for name in names if name.startswith(LINK_PREFIX)]


def namespace_pids() -> list[int]:
    """The processes running in a local fleet's namespaces."""
    pids = []
    for namespace in our_namespaces():
        output = ip("netns", "pids", namespace, check=False).stdout
        pids.extend(int(p) for p in output.split() if p.isdigit())
    return pids


def make_network(hosts: int, per_host: int) -> dict[str, list[str]]:
    """The bridge, and `hosts` namespaces each joined to it by a veth pair with
    `per_host` addresses of its own; each namespace's addresses, by name."""
    ip("link", "add", BRIDGE, "type", "bridge")
    ip("addr", "add", f"{BRIDGE_ADDRESS}/{NETWORK.prefixlen}", "dev", BRIDGE)
    ip("link", "set", BRIDGE, "up")
    addresses: dict[str, list[str]] = {}
    for index in range(1, hosts + 1):
        namespace = f"{NAMESPACE_PREFIX}{index}"
        outside, inside = f"{LINK_PREFIX}{index}h", f"{LINK_PREFIX}{index}n"
        addresses[namespace] = host_addresses(index, per_host)
        ip("netns", "add", namespace)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", namespace)
        ip("link", "set", outside, "master", BRIDGE)
        ip("link", "set", outside, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        low, high = FLEET_PORT_RANGE
        ip("netns", "exec", namespace, "sysctl", "-q", "-w",
            f"net.ipv4.ip_local_port_range={low} {high}")  # fmt: skip
        for address in addresses[namespace]:
            ip("-n", namespace, "addr", "add", f"{address}/{NETWORK.prefixlen}", "dev", inside)
        ip("-n", namespace, "link", "set", inside, "up")
    return addresses


def remove_network(timeout_s: float) -> dict[str, list[str]]:
    """Delete every namespace of a local fleet, then its links (the veths go with their
    namespaces; the bridge is deleted until it is gone or `timeout_s` passed); what was
    removed, by kind."""
    removed: dict[str, list[str]] = {"namespaces": [], "links": []}
    for namespace in our_namespaces():
        ip("netns", "del", namespace, check=False)
        removed["namespaces"].append(namespace)
    deadline = time.monotonic() + timeout_s
    while our_links() and time.monotonic() < deadline:
        for link in our_links():
            if ip("link", "del", link, check=False).returncode == 0:
                removed["links"].append(link)
        time.sleep(0.1)
    return removed

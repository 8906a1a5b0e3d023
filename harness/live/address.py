"""Where `--live` and `--prometheus` listen: `PORT` on 127.0.0.1, or `HOST:PORT` with an IP
address the user names (off loopback: `public`, which the harness warns of)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from model.errors import UserError

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ListenAddress:
    """Where a live server listens; `public` when the user chose a host off loopback."""

    host: str
    port: int

    @property
    def public(self) -> bool:
        return not ipaddress.ip_address(self.host).is_loopback


def parse_listen(spec: str, option: str) -> ListenAddress:
    """`PORT` (on 127.0.0.1) or `HOST:PORT` / `[V6]:PORT` (an IP address); port 0: one
    the OS picks. UserError naming `option` otherwise."""
    text = spec.strip()
    host, port_text = LOOPBACK, text
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host, port_text = inside, rest.removeprefix(":")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise UserError(
            f"{option} {spec}: {host!r} is not an IP address (give PORT, or HOST:PORT)"
        ) from None
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UserError(f"{option} {spec}: the port must be a number in 0..65535")
    return ListenAddress(host, int(port_text))

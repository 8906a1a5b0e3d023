"""What a server is started with: the address it listens on, its command line (`python
-m servers ...`, or a command template with its placeholders filled), and the contract
options that choose its protocol; and why a framework cannot be started on a case (a
protocol, a sink, workers it does not offer)."""

from __future__ import annotations

import ipaddress
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from harness.secrets import SECRET_FIELD, SecretField
from harness.tls import Certificates
from model.errors import UserError
from servers import SINK_PLACEHOLDERS, Framework, command_placeholders
from servers.contract import (
    GRIDFS_DATABASE,
    MONGO_BATCH_MAX_RECORDS,
    PROTOCOL_H1,
    PROTOCOLS,
    TLS_PROTOCOLS,
)
from servers.core.sinks import DEFAULT_MONGO_URL


def check_listen_address(host: str, what: str = "a server") -> str:
    """`host` when a server may listen there: one IP address written out (a name, or a
    short form such as `0` or `0.0` that the socket API reads as every address, is
    refused), neither unspecified (`0.0.0.0`, `::`, `::0`) nor multicast nor broadcast —
    a server benchmarked here never listens on every address of the machine."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UserError(
            f"{what} listens on an IP address given explicitly (127.0.0.1, ::1, or the "
            f"address the load hosts reach), not {host!r}"
        ) from None
    broadcast = address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255")
    if address.is_unspecified or address.is_multicast or broadcast:
        raise UserError(
            f"{what} listens on one address given explicitly, never {host!r} "
            "(every address of the machine, or a group)"
        )
    return host


# The contract options (SinkStore.server_args, Backends.server_args) and the placeholders
# they fill; flags without a value are in FLAG_PLACEHOLDERS.
OPTION_PLACEHOLDERS = {
    "--sink-path": "sink_path",
    "--mongo-url": "mongo_url",
    "--mongo-w": "mongo_w",
    "--mongo-batch": "mongo_batch",
    "--mongo-db": "mongo_db",
    "--files-dir": "files_dir",
    "--memcached": "memcached",
    "--mc-socket-port": None,  # the memcached socket service: a command does not serve it
    "--protocol": "protocol",
    "--tls-cert": "tls_cert",
    "--tls-key": "tls_key",
}
FLAG_PLACEHOLDERS = {"--durable": "durable"}


def placeholder_values(
    *, host: str, port: int, sink: str, workers: int, extra_args: Sequence[str] = ()
) -> dict[str, Any]:
    """What each placeholder of a command stands for in this start (`{secret:NAME}`: the
    environment variable NAME, learned as a secret: harness.secrets)."""
    values: dict[str, Any] = {
        SECRET_FIELD: SecretField(),
        "python": sys.executable,
        "host": host,
        "port": str(port),
        "sink": sink,
        "sink_path": "",
        "mongo_url": DEFAULT_MONGO_URL,
        "mongo_db": GRIDFS_DATABASE,
        "mongo_w": "1",
        "mongo_batch": str(MONGO_BATCH_MAX_RECORDS),
        "durable": "0",
        "files_dir": "",
        "memcached": "127.0.0.1:11211",
        "workers": str(workers),
        "protocol": "h1",
        "tls_cert": "",
        "tls_key": "",
    }
    args = list(extra_args)
    while args:
        option = args.pop(0)
        if option in FLAG_PLACEHOLDERS:
            values[FLAG_PLACEHOLDERS[option]] = "1"
        elif option in OPTION_PLACEHOLDERS and args:
            value = args.pop(0)
            name = OPTION_PLACEHOLDERS[option]
            if name is not None:
                values[name] = value
        else:
            raise ValueError(f"no placeholder takes the server option {option!r}")
    return values


def fill_command(template: str, values: dict[str, Any]) -> list[str]:
    """The argv of a command template: split as a shell would (no shell runs it), then
    each word's placeholders filled, so a path with spaces stays one argument."""
    return [word.format(**values) for word in shlex.split(template)]


def protocol_unsupported(framework: Framework, protocol: str) -> str | None:
    """Why `framework` cannot be started on `protocol` (its why_not), or None."""
    if protocol not in PROTOCOLS:
        return f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}"
    if protocol not in framework.protocols:
        return framework.why_not(protocol)
    return None


def protocol_args(protocol: str, certificates: Certificates | None) -> list[str]:
    """The contract options that start a server on `protocol` (none for h1); UserError
    when a TLS protocol has no certificates."""
    if protocol == PROTOCOL_H1:
        return []
    if protocol not in TLS_PROTOCOLS:
        return ["--protocol", protocol]
    if certificates is None:
        raise UserError(f"protocol {protocol} needs the run's certificates (harness.tls)")
    return [
        "--protocol",
        protocol,
        "--tls-cert",
        str(certificates.cert_path),
        "--tls-key",
        str(certificates.key_path),
    ]


def command_unsupported(framework: Framework, *, sink: str, workers: int) -> str | None:
    """Why a command server cannot run this case (a sink, workers), or None."""
    names = command_placeholders(framework.command)
    if sink not in framework.sinks:
        needed = " or ".join(f"{{{name}}}" for name in SINK_PLACEHOLDERS.get(sink, ("sink",)))
        return f"{framework.name} has no {sink} sink (its command has no {{sink}} and {needed})"
    if workers > 1 and "workers" not in names:
        return f"{framework.name} runs one process only (its command has no {{workers}})"
    return None


def server_command(
    framework: str,
    *,
    sink: str = "empty",
    workers: int = 1,
    loop: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    cpus: str | None = None,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that runs `framework` behind the contract, pinned when `cpus`."""
    command = [
        sys.executable,
        "-m",
        "servers",
        framework,
        "--host",
        host,
        "--port",
        str(port),
        "--sink",
        sink,
        "--workers",
        str(workers),
    ]
    if loop:
        command += ["--loop", loop]
    command += list(extra_args)
    if cpus is not None:
        command = ["taskset", "-c", cpus, *command]
    return command

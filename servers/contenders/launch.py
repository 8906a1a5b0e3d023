"""`python -m servers.contenders.launch SERVER --protocol P --tls-cert C --tls-key K -- ARGS`:
run a contender's stock server (`python -m SERVER ARGS`) with the flags that make it speak
the case's protocol.

A command template fills `{protocol}`, `{tls_cert}` and `{tls_key}` in (the last two ""
on a cleartext case), but it cannot choose flags by them: Granian needs `--http 2` for h2
and h2c and `--http 1` otherwise, gunicorn `--http-protocols h2` (and for h2c
`--http2-cleartext prior-knowledge`), hypercorn a configuration object per TLS protocol.
This module only chooses them (`protocol_flags`, a pure function) and replaces itself
with the server: no process stays between the harness and the server.
"""

from __future__ import annotations

import argparse
import os
import sys

from servers.contract import (
    PROTOCOL_H1,
    PROTOCOL_H1_TLS,
    PROTOCOL_H2,
    PROTOCOL_H2C,
    PROTOCOLS,
    TLS_PROTOCOLS,
)

SERVERS = ("granian", "gunicorn", "hypercorn")
# hypercorn's ALPN per TLS protocol (servers.contenders.tls); a cleartext bind serves h1
# and h2c (prior knowledge) alike
_HYPERCORN_CONFIG = {
    PROTOCOL_H1_TLS: "python:servers.contenders.tls.H1TLS",
    PROTOCOL_H2: "python:servers.contenders.tls.H2",
}


def protocol_flags(server: str, protocol: str, tls_cert: str = "", tls_key: str = "") -> list[str]:
    """The flags that make `server` speak `protocol`; ValueError for a missing file or an
    unknown server or protocol."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    tls = protocol in TLS_PROTOCOLS
    if tls and not (tls_cert and tls_key):
        raise ValueError(f"protocol {protocol} needs --tls-cert and --tls-key")
    if server == "granian":
        http = "2" if protocol in (PROTOCOL_H2, PROTOCOL_H2C) else "1"
        flags = ["--http", http]
        if tls:
            flags += ["--ssl-certificate", tls_cert, "--ssl-keyfile", tls_key]
            flags += ["--ssl-protocol-min", "tls1.3"]
        return flags
    if server == "gunicorn":
        # gunicorn 27's gevent worker serves HTTP/2 too; its ALPN is then ["h2"]
        flags = ["--certfile", tls_cert, "--keyfile", tls_key] if tls else []
        if protocol in (PROTOCOL_H2, PROTOCOL_H2C):
            flags += ["--http-protocols", "h2"]
        if protocol == PROTOCOL_H2C:
            flags += ["--http2-cleartext", "prior-knowledge"]
        return flags
    if server == "hypercorn":
        if not tls:
            return []  # h1 and h2c: the same cleartext bind
        return ["--certfile", tls_cert, "--keyfile", tls_key, "-c", _HYPERCORN_CONFIG[protocol]]
    raise ValueError(f"server {server!r} is not one of {', '.join(SERVERS)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m servers.contenders.launch", description=__doc__
    )
    parser.add_argument("server", choices=SERVERS)
    parser.add_argument("--protocol", choices=PROTOCOLS, default=PROTOCOL_H1)
    parser.add_argument("--tls-cert", default="", help="PEM certificate chain (h1-tls, h2)")
    parser.add_argument("--tls-key", default="", help="PEM private key (h1-tls, h2)")
    argv = sys.argv[1:] if argv is None else argv
    # Everything after the first `--` is the server's own (its flags may look like ours).
    ours, args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    options = parser.parse_args(ours)
    try:
        flags = protocol_flags(options.server, options.protocol, options.tls_cert, options.tls_key)
    except ValueError as error:
        parser.error(str(error))
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", options.server, *flags, *args])


if __name__ == "__main__":
    main()

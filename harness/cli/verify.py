"""`harness verify`: start each server and check every route it serves before any number,
over each protocol asked for (`--protocol h1,h1-tls,h2,h2c`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from harness.cli.options import (
    JUNIT_OPTION,
    MARKDOWN_OPTION,
    MONGO_URL_OPTION,
    SERVER_OPTION,
    SERVERS_FILE_OPTION,
    STRICT_VERIFY_OPTION,
    check_cpus,
    console,
    parse_sinks,
)
from harness.secrets import redact
from model.errors import UserError
from servers.contract import PROTOCOL_H1, PROTOCOLS

if TYPE_CHECKING:
    from harness.verify import Verification


def parse_protocols(spec: str) -> list[str]:
    """`h1,h2` as a list of protocols; an unknown one is a UserError naming the known ones."""
    protocols = [p.strip() for p in spec.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown or not protocols:
        raise UserError(
            f"unknown protocol {', '.join(unknown) or repr(spec)}: "
            f"choose from {', '.join(PROTOCOLS)}"
        )
    return protocols


def verify_command(
    frameworks: str = typer.Option("all", help="all, or a comma-separated list of frameworks."),
    sinks: str = typer.Option(
        "empty", "--sinks", "--sink", help="Comma-separated sinks to verify with."
    ),
    server_cpus: str = typer.Option(None, help="Pin each server to these CPUs (e.g. 0)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    backends: bool = typer.Option(
        True, help="Also check /files, /gridfs, /mc and the memcached socket service."
    ),
    mongo_url: str = MONGO_URL_OPTION,
    servers: list[str] = SERVER_OPTION,
    servers_file: Path = SERVERS_FILE_OPTION,
    protocol: str = typer.Option(
        PROTOCOL_H1, help=f"Comma-separated protocols to verify over ({', '.join(PROTOCOLS)})."
    ),
    tls_cert: Path = typer.Option(
        None, help="The PEM certificate the TLS protocols serve (default: a throwaway CA's)."
    ),
    tls_key: Path = typer.Option(None, help="The PEM private key of --tls-cert."),
    junit: Path = JUNIT_OPTION,
    markdown: Path = MARKDOWN_OPTION,
    strict_verify: bool = STRICT_VERIFY_OPTION,
) -> None:
    """Start each server and check every route it serves, WebSocket rules, latency and
    the sinks asked for; routes a baseline does not serve (or a command's server answers
    404) are `not supported`. Over h1-tls and h2 the TLS checks run too, over h2 and h2c
    the HTTP/2 ones; a server that does not speak a protocol is skipped with its reason.
    Exit 1 on a failure."""
    from harness.frameworks import register_servers, select_frameworks, server_option_names
    from harness.tls import user_certificates

    register_servers(servers, servers_file)
    names = select_frameworks(frameworks, server_option_names(servers))
    sink_names = parse_sinks(sinks)
    protocols = parse_protocols(protocol)
    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together: give both, or neither")
    certificates = user_certificates(str(tls_cert), str(tls_key)) if tls_cert else None
    cpus = check_cpus(server_cpus) if server_cpus else None
    # the verifiers (and their HTTP clients) load once the command line is known good
    from harness.verify import strictly
    from harness.verify.batch import verify_servers
    from harness.verify.console import print_verifications

    results = verify_servers(
        names, sink_names, protocols, cpus=cpus, mongo_url=mongo_url, backends=backends,
        certificates=certificates, status=console.status,
    )  # fmt: skip
    if strict_verify:  # a deviation the server does not declare fails
        results = [dataclasses.replace(r, checks=strictly(r.checks, r.framework)) for r in results]
    _write_outputs(results, junit, markdown)
    if as_json:
        print(json.dumps(redact([r.to_dict() for r in results]), indent=2))
    else:
        print_verifications(results, console)
    if not all(r.ok for r in results if not r.skipped):
        raise typer.Exit(1)


def _write_outputs(results: list[Verification], junit: Path | None, markdown: Path | None) -> None:
    """The verifications as JUnit XML (--junit) and Markdown (--markdown), when asked."""
    if junit is None and markdown is None:
        return
    from harness.outputs import write_output
    from harness.outputs.junit import verify_junit
    from harness.outputs.markdown import verify_markdown

    if junit is not None:
        write_output(junit, redact(verify_junit(results)), "--junit")
    if markdown is not None:
        write_output(markdown, redact(verify_markdown(results)), "--markdown")

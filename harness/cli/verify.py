"""`harness verify`: start each server and check every route it serves before any number,
over each protocol asked for (`--protocol h1,h1-tls,h2,h2c`)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

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
from servers import scratch
from servers.contract import PROTOCOL_H1, PROTOCOLS, TLS_PROTOCOLS


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
    from harness.frameworks import register_servers, select_frameworks
    from harness.services.ferretdb import new_database_name, own_database
    from harness.tls import temporary_certificates, user_certificates
    from harness.verify import strictly, verify_backends, verify_framework

    register_servers(servers, servers_file)
    names = select_frameworks(frameworks)
    sink_names = parse_sinks(sinks)
    protocols = parse_protocols(protocol)
    if (tls_cert is None) != (tls_key is None):
        raise UserError("--tls-cert and --tls-key go together: give both, or neither")
    certificates = user_certificates(str(tls_cert), str(tls_key)) if tls_cert else None
    cpus = check_cpus(server_cpus) if server_cpus else None
    results = []
    mongo_db = new_database_name()  # on a user's MongoDB: created here, dropped at the end
    with contextlib.ExitStack() as stack:
        if mongo_url is not None and (backends or "mongo" in sink_names):
            stack.enter_context(own_database(mongo_url, mongo_db))
        services = None
        if backends:
            with console.status("starting FerretDB and memcached for the backend checks…"):
                workdir = Path(stack.enter_context(scratch.temporary_directory("verify")))
                services = stack.enter_context(verify_backends(workdir, mongo_url, mongo_db))
        if certificates is None and any(p in TLS_PROTOCOLS for p in protocols):
            holder, certificates = temporary_certificates()  # this run's, removed after
            stack.enter_context(holder)
        for name in names:
            for sink in sink_names:
                for case_protocol in protocols:
                    what = f"{name} ({sink} sink, {case_protocol})"
                    with console.status(f"verifying {what}…", spinner="dots"):
                        results.append(
                            verify_framework(
                                name,
                                sink,
                                cpus=cpus,
                                mongo_url=mongo_url,
                                backends=services,
                                mongo_db=mongo_db,
                                protocol=case_protocol,
                                certificates=certificates,
                            )
                        )
    if strict_verify:  # a deviation the server does not declare fails
        results = [dataclasses.replace(r, checks=strictly(r.checks, r.framework)) for r in results]
    if junit is not None or markdown is not None:
        from harness.outputs import write_output
        from harness.outputs.junit import verify_junit
        from harness.outputs.markdown import verify_markdown

        if junit is not None:
            write_output(junit, redact(verify_junit(results)), "--junit")
        if markdown is not None:
            write_output(markdown, redact(verify_markdown(results)), "--markdown")
    if as_json:
        print(json.dumps(redact([r.to_dict() for r in results]), indent=2))
    else:
        table = Table("framework", "sink", "protocol", "check", "ok", "detail")
        for result in results:
            row = (result.framework, result.sink, result.protocol)
            if result.skipped:
                table.add_row(*row, "-", "[yellow]skipped[/]", result.skipped)
            if result.error:
                table.add_row(*row, "start", "[red]FAIL[/]", redact(result.error))
            for check in result.checks:
                mark = "[green]ok[/]" if check.ok else "[red]FAIL[/]"
                if check.ok and check.warnings:
                    mark = f"[yellow]ok, {len(check.warnings)} warning(s)[/]"
                if not check.supported:
                    mark = "[dim]not supported[/]"
                table.add_row(*row, check.name, mark, redact(check.detail))
        console.print(table)
        for result in results:  # each finding again, whole on one line (the table wraps it)
            for check in result.checks:
                if not check.ok:
                    said = escape(redact(f"{result.framework}: {check.name}: {check.detail}"))
                    console.print(f"[red]failed:[/] {said}", soft_wrap=True)
            for deviation in result.warnings:
                line = deviation.line(result.framework)
                said = escape(f"{result.framework}: {line}")
                console.print(f"[yellow]warning:[/] {said}", soft_wrap=True)
        passed = sum(r.ok for r in results if not r.skipped)
        skipped = sum(bool(r.skipped) for r in results)
        warned = sum(bool(r.ok and r.warnings) for r in results)
        console.print(
            f"{passed} of {len(results) - skipped} passed"
            + (f" ({warned} with warnings: --strict-verify fails them)" if warned else "")
            + f", {skipped} not offered"
        )
    if not all(r.ok for r in results if not r.skipped):
        raise typer.Exit(1)

"""`harness verify` over many servers: every framework with every sink over every
protocol asked for, sharing one set of backend services, one MongoDB database of the
user's (created here, dropped at the end) and one throwaway CA for the TLS protocols."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from harness.services.ferretdb import new_database_name, own_database
from harness.tls import Certificates, temporary_certificates
from harness.verify import verify_framework
from harness.verify.backends import verify_backends
from harness.verify.results import Verification
from servers import scratch
from servers.contract import TLS_PROTOCOLS

# What shows the work under way: a spinner with its text (rich's Console.status), or none.
Status = Callable[[str], AbstractContextManager[object]]


def no_status(text: str) -> AbstractContextManager[object]:
    """A status that shows nothing."""
    return contextlib.nullcontext()


def verify_servers(
    names: Sequence[str],
    sinks: Sequence[str],
    protocols: Sequence[str],
    *,
    cpus: str | None = None,
    mongo_url: str | None = None,
    backends: bool = True,
    certificates: Certificates | None = None,
    status: Status = no_status,
) -> list[Verification]:
    """Verify each framework of `names` with each of `sinks` over each of `protocols`
    (`verify_framework`), in that order. With `backends`, FerretDB and memcached are
    started once for the backend checks; on `mongo_url` (a user's MongoDB) the checks use
    a database of their own, dropped at the end. The TLS protocols serve `certificates`
    (None: a throwaway CA's, removed after). `status` shows what is under way."""
    results = []
    mongo_db = new_database_name()  # on a user's MongoDB: created here, dropped at the end
    with contextlib.ExitStack() as stack:
        if mongo_url is not None and (backends or "mongo" in sinks):
            stack.enter_context(own_database(mongo_url, mongo_db))
        services = None
        if backends:
            with status("starting FerretDB and memcached for the backend checks…"):
                workdir = Path(stack.enter_context(scratch.temporary_directory("verify")))
                services = stack.enter_context(verify_backends(workdir, mongo_url, mongo_db))
        if certificates is None and any(p in TLS_PROTOCOLS for p in protocols):
            holder, certificates = temporary_certificates()  # this run's, removed after
            stack.enter_context(holder)
        for name in names:
            for sink in sinks:
                for protocol in protocols:
                    with status(f"verifying {name} ({sink} sink, {protocol})…"):
                        verification = verify_framework(
                            name,
                            sink,
                            cpus=cpus,
                            mongo_url=mongo_url,
                            backends=services,
                            mongo_db=mongo_db,
                            protocol=protocol,
                            certificates=certificates,
                        )
                    results.append(verification)
    return results

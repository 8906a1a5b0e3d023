"""The harness process's secrets: every one it was given, hidden wherever it writes.

A secret is learned once, where it enters (`--mongo-url` as the plan is built, a command's
`{secret:NAME}` as the command is registered: harness.frameworks), and hidden everywhere
after: run.json (and steps.csv, FILES.md and the report, drawn from the same Run), the
one-line error `main()` prints, the console. The secrets are the process's own, like its
environment, so this module holds them; model.secrets does the hiding.

How a server is given a secret without putting it on a command line (where `ps` shows it
to every user): `server_environment` moves `--mongo-url URL` out of the server's
arguments into its environment (servers.contract.MONGO_URL_ENV).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from model.errors import UserError
from model.secrets import MIN_SECRET_CHARS, Redactor
from servers import SECRET_NAME
from servers.contract import MONGO_URL_ENV

_lock = threading.Lock()
_redactor = Redactor()

# `{secret:NAME}` in a command: the harness's environment variable NAME (docs/contract.md)
SECRET_FIELD = "secret"


def keep_url(url: str | None) -> str | None:
    """Learn the secrets of `url` (its password); returns `url` (a typer callback too)."""
    global _redactor
    if url:
        with _lock:
            _redactor = _redactor.with_url(url)
    return url


def keep_secret(secret: str) -> str:
    """Learn `secret`; returns it."""
    global _redactor
    with _lock:
        _redactor = _redactor.with_secret(secret)
    return secret


def redactor() -> Redactor:
    """Everything this process has learned to hide, so far."""
    return _redactor


def redact(value: Any) -> Any:
    """`value` (text, or a JSON-able structure) with every known secret hidden."""
    return _redactor.value(value)


def secret_value(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of `{secret:NAME}`: the environment variable NAME, learned as a secret.

    UserError when NAME is not a variable name, is not set, or is too short to hide."""
    environ = os.environ if environ is None else environ
    if not SECRET_NAME.fullmatch(name):
        raise UserError(
            f"{{{SECRET_FIELD}:{name}}}: write {{{SECRET_FIELD}:NAME}}, NAME an environment "
            "variable's name"
        )
    value = environ.get(name)
    if value is None:
        raise UserError(f"{{{SECRET_FIELD}:{name}}}: the environment variable {name} is not set")
    if len(value) < MIN_SECRET_CHARS:
        raise UserError(
            f"{{{SECRET_FIELD}:{name}}}: a secret of fewer than {MIN_SECRET_CHARS} characters "
            "cannot be hidden in what the run writes"
        )
    return keep_secret(value)


class SecretField:
    """What `{secret:NAME}` formats as (str.format calls __format__ with the spec NAME)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = environ

    def __format__(self, name: str) -> str:
        if not name:
            raise UserError(f"{{{SECRET_FIELD}}}: write {{{SECRET_FIELD}:NAME}}")
        return secret_value(name, self.environ)


def server_environment(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """A server's arguments without `--mongo-url URL`, and the environment variables that
    give it the URL instead (servers.contract.MONGO_URL_ENV): a command line is shown to
    every user of the machine (`ps`), a process's environment only to its own."""
    rest: list[str] = []
    environment: dict[str, str] = {}
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "--mongo-url" and words:
            environment[MONGO_URL_ENV] = keep_url(words.pop(0)) or ""
        elif word.startswith("--mongo-url="):
            environment[MONGO_URL_ENV] = keep_url(word.partition("=")[2]) or ""
        else:
            rest.append(word)
    return rest, environment

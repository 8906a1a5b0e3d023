"""The boards' workloads nginx can serve without a module (docs/contract.md, "The boards'
workloads"): short fixed bodies from `return`, the 10 KB ones as static files,
`/json-comp` through nginx's own gzip filter (compressed per request, at
contract.GZIP_LEVEL). `/json` is the serialized message as a
fixed string: nginx has no serializer. `/delay/{ms}` and `/upload` are not served
(servers.NGINX_ROUTE_NOTES says why)."""

from __future__ import annotations

import json
from pathlib import Path

from servers import contract

# nginx takes a token of at most 4 KB in its config: the two 10 KB bodies are files.
BODY_10K_FILE = "body-10k"
JSON_COMP_FILE = "json-comp.json"


def write_workload_files(directory: Path) -> None:
    """Write the 10 KB body and the json-comp document into `directory`, for nginx."""
    (directory / BODY_10K_FILE).write_bytes(contract.BODY_10K)
    document = json.dumps(contract.JSON_COMP_DOCUMENT, separators=(",", ":"))
    (directory / JSON_COMP_FILE).write_text(document)


def _literal(body: bytes | str) -> str:
    """`body` as an nginx single-quoted string; ValueError when it cannot be one."""
    text = body.decode() if isinstance(body, bytes) else body
    if any(c in text for c in "'$\\\n"):
        raise ValueError(f"{text[:40]!r} cannot be written as an nginx string")
    return f"'{text}'"


def workload_locations(directory: Path | None) -> str:
    """The location blocks of `/json` and `/plaintext`, and with `directory` (where
    `write_workload_files` wrote) of `/json-comp` and `/body/10k`."""
    message = json.dumps(contract.JSON_MESSAGE, separators=(",", ":"))
    text, json_type = contract.TEXT_CONTENT_TYPE, contract.JSON_CONTENT_TYPE
    fixed = f"""
        location = {contract.ROUTE_JSON} {{
            default_type {json_type};
            return 200 {_literal(message)};
        }}
        location = {contract.ROUTE_PLAINTEXT} {{
            default_type {text};
            return 200 {_literal(contract.PLAINTEXT_BODY)};
        }}"""
    if directory is None:
        return fixed
    files = _literal(str(directory.resolve()))[1:-1]
    return f"""{fixed}
        location = {contract.ROUTE_BODY_10K} {{
            default_type {text};
            alias '{files}/{BODY_10K_FILE}';
        }}
        location = {contract.ROUTE_JSON_COMP} {{
            default_type {json_type};
            gzip on;
            gzip_types {json_type};
            gzip_min_length 0;
            gzip_comp_level {contract.GZIP_LEVEL};
            gzip_vary on;
            gzip_proxied any;
            alias '{files}/{JSON_COMP_FILE}';
        }}"""

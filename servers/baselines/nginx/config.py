"""nginx.conf as text: the template filled in (`render_config`), and the blocks inside its
`http {}` that the baseline (`baseline_server_block`, `status_server_block`) and the
`lb:N` topology's reverse proxy (`proxy_blocks`) are made of. Pure functions of their
arguments: the harness renders the proxy with them, so nginx config is written once.
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Mapping, Sequence
from pathlib import Path

from servers import contract
from servers.baselines.nginx.workloads import workload_locations

TEMPLATE_PATH = Path(__file__).resolve().parent / "nginx.conf.template"
STATUS_PATH = "/status"
# Where nginx's own 400s go to be judged (an internal URI: a named location needs a URI,
# which a request refused while parsing does not have).
BAD_REQUEST_PATH = "/.bad-request"
UPSTREAM_KEEPALIVE = 512  # idle connections each LB worker keeps to the instances
# An instance closes a connection idle for its head deadline (docs/contract.md, "Slow
# clients"): the balancer lets its idle upstream connections go well before that, so it
# never sends a request down one the instance is closing.
UPSTREAM_KEEPALIVE_TIMEOUT_S = contract.HEAD_TIMEOUT_S / 2
MAX_WORKER_CONNECTIONS = 65536
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render_template(text: str, values: Mapping[str, object]) -> str:
    """Fill `{{name}}` placeholders; a placeholder without a value is an error, not a blank."""
    missing = sorted({name for name in _PLACEHOLDER.findall(text) if name not in values})
    if missing:
        raise KeyError(f"no value for template placeholder(s): {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), text)


def quote(value: str) -> str:
    """`value` as a double-quoted nginx string; nginx cannot take a literal `$` in one."""
    if "$" in value or "\n" in value or "\0" in value:
        raise ValueError(f"nginx cannot take {value!r} literally ($, newline or NUL)")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def listen_address(host: str, port: int) -> str:
    """`host:port` as nginx's `listen` wants it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# The `listen` parameters that make each protocol (nginx 1.22, Debian 12's): `ssl` for TLS,
# `http2` for HTTP/2, which over TLS nginx offers by ALPN and without TLS speaks to a client
# that sends the HTTP/2 preface first (prior knowledge; an HTTP/1.1 request is not served).
LISTEN_PARAMETERS = {
    contract.PROTOCOL_H1: "",
    contract.PROTOCOL_H1_TLS: " ssl",
    contract.PROTOCOL_H2: " ssl http2",
    contract.PROTOCOL_H2C: " http2",
}


def listen_directive(host: str, port: int, protocol: str = contract.PROTOCOL_H1) -> str:
    """A public listener for `protocol`: SO_REUSEPORT per worker and the contract's backlog."""
    if protocol not in LISTEN_PARAMETERS:
        raise ValueError(f"protocol {protocol!r} is not one of {', '.join(contract.PROTOCOLS)}")
    return (
        f"listen {listen_address(host, port)}{LISTEN_PARAMETERS[protocol]} reuseport "
        f"backlog={contract.LISTEN_BACKLOG};"
    )


def tls_directives(cert_path: str, key_path: str) -> str:
    """A server block's TLS: the given certificate and key, TLS 1.3 only (the contract's
    TLS_MINIMUM_VERSION). nginx's other TLS settings stay its defaults (session tickets on,
    no session cache), as a plain nginx TLS site has them."""
    return (
        f"ssl_certificate {quote(str(Path(cert_path).resolve()))};\n"
        f"        ssl_certificate_key {quote(str(Path(key_path).resolve()))};\n"
        "        ssl_protocols TLSv1.3;"
    )


def types_block() -> str:
    """The `types {}` entries: exactly the contract's file types, nothing else."""
    by_type: dict[str, list[str]] = {}
    for extension, mime in contract.FILE_CONTENT_TYPES.items():
        by_type.setdefault(mime, []).append(extension.lstrip("."))
    return "\n".join(f"        {mime} {' '.join(exts)};" for mime, exts in by_type.items())


def _user_directive() -> str:
    # As root, nginx would drop its workers to `nobody`, who may not read --files-dir (a
    # private temporary directory in the tests): keep the invoking user, like every other
    # server. As anyone else the directive is ignored with a warning, so leave it out.
    if os.geteuid() != 0:
        return ""
    import grp
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    return f"user {user} {group};"


def render_config(run_dir: Path, blocks: str, workers: int = 1) -> str:
    """The whole nginx.conf: the template's main/events/http parts around `blocks`."""
    _, nofile_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nofile = 1_048_576 if nofile_hard == resource.RLIM_INFINITY else min(nofile_hard, 1_048_576)
    inner_run_dir = quote(str(run_dir))[1:-1]  # the template already has the quotes
    return render_template(
        TEMPLATE_PATH.read_text(),
        {
            "user_directive": _user_directive(),
            "workers": workers,
            "nofile": nofile,
            # Each proxied connection costs two descriptors; leave room for files.
            "worker_connections": max(1024, min(MAX_WORKER_CONNECTIONS, nofile // 2)),
            "run_dir": inner_run_dir,
            "types": types_block(),
            "default_type": contract.DEFAULT_CONTENT_TYPE,
            "blocks": blocks,
        },
    )


def nginx_time(seconds: float) -> str:
    """`seconds` as an nginx time value, in whole milliseconds (at least one: a zero
    keepalive_timeout would turn keep-alive off)."""
    return f"{max(1, round(seconds * 1000))}ms"


def client_timeout_directives(head_timeout_s: float, body_timeout_s: float) -> str:
    """The contract's slow-client deadlines as nginx has them (docs/contract.md, "Slow
    clients"), for a server block.

    client_header_timeout runs from the accept to the end of the first head: a deadline, not
    reset by a trickle. keepalive_timeout closes an idle kept-alive connection; the next
    request's head then has client_header_timeout from its first byte. client_body_timeout is
    nginx's per-read limit (nginx has no whole-body deadline); a body nginx does not read
    (the baseline answers `/` without one) is discarded for at most lingering_time.
    """
    head = nginx_time(head_timeout_s)
    body = nginx_time(body_timeout_s)
    return (
        f"client_header_timeout {head};\n"
        f"        keepalive_timeout {head};\n"
        f"        client_body_timeout {body};\n"
        f"        lingering_time {body};"
    )


def baseline_server_block(
    host: str,
    port: int,
    files_dir: str | None,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
    body_timeout_s: float = contract.BODY_TIMEOUT_S,
    protocol: str = contract.PROTOCOL_H1,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    workloads_dir: Path | None = None,
) -> str:
    """The contract's `/`, the workloads nginx serves (`workload_locations`, the 10 KB
    ones from `workloads_dir`) and, with `files_dir`, `/files/{name}`; everything else 404.

    `protocol` is the listener's (LISTEN_PARAMETERS); a TLS one needs `tls_cert` and `tls_key`.
    Since nginx 1.19.7 HTTP/2 connections keep the same client_header_timeout and
    keepalive_timeout as HTTP/1.1 ones, so the slow-client directives serve every protocol.
    """
    if any(c in contract.TEXT_BODY.decode() for c in '$"\\'):
        raise ValueError("the text body cannot be written as an nginx string")
    tls = ""
    if protocol in contract.TLS_PROTOCOLS:
        if tls_cert is None or tls_key is None:
            raise ValueError(f"protocol {protocol} needs a certificate and its key")
        tls = "\n        " + tls_directives(tls_cert, tls_key)
    files = ""
    if files_dir is not None:
        # Only names matching the contract's pattern reach the file system (one segment,
        # no leading dot), after nginx decoded and normalised the URI; a symlink leaving
        # the directory is refused by disable_symlinks (403), answered 404 like a miss.
        root = quote(str(Path(files_dir).resolve()) + "/")[1:-1]
        files = f"""
        location ~ "^{contract.ROUTE_FILES_PREFIX}({contract.FILE_NAME_PATTERN})$" {{
            alias "{root}$1";
            disable_symlinks on;
            error_page 403 = @not_found;
        }}"""
    # nginx refuses a target that climbs above the root (/files/..%2f..%2fx) or holds a
    # NUL with 400 while parsing the request line; under /files/ that is a file that is
    # not there (404, as every server answers), elsewhere a bad request stays a 400.
    return f"""
    server {{
        {listen_directive(host, port, protocol)}{tls}
        {client_timeout_directives(head_timeout_s, body_timeout_s)}
        error_page 400 = {BAD_REQUEST_PATH};
        location = {contract.ROUTE_TEXT} {{
            default_type {contract.TEXT_CONTENT_TYPE};
            return 200 "{contract.TEXT_BODY.decode()}";
        }}{workload_locations(workloads_dir)}{files}
        location / {{
            return 404;
        }}
        location @not_found {{
            return 404;
        }}
        location = {BAD_REQUEST_PATH} {{
            internal;
            if ($request ~ "^[A-Z]+ {contract.ROUTE_FILES_PREFIX}") {{  # the raw request line
                return 404;
            }}
            return 400;
        }}
    }}
"""


def status_server_block(port: int) -> str:
    """A loopback-only server with stub_status, which the telemetry reads."""
    return f"""
    server {{
        listen 127.0.0.1:{port};
        location = {STATUS_PATH} {{
            stub_status;
        }}
        location / {{
            return 404;
        }}
    }}
"""


def proxy_blocks(
    listen_host: str,
    listen_port: int,
    upstream_ports: Sequence[int],
    keepalive: int = UPSTREAM_KEEPALIVE,
    head_timeout_s: float = contract.HEAD_TIMEOUT_S,
    body_timeout_s: float = contract.BODY_TIMEOUT_S,
) -> str:
    """A round-robin reverse proxy to the instances on 127.0.0.1, with kept-alive upstreams.

    HTTP/1.1 with an empty Connection header keeps upstream connections open across
    requests; a WebSocket upgrade is passed through (Connection: upgrade) when asked for.
    Clients get the head deadline an instance would apply (client_timeout_directives); nginx
    reads a whole body before it proxies the request (under its per-read limit), so an
    instance never waits for a slow client's body.
    """
    if not upstream_ports:
        raise ValueError("a load balancer needs at least one upstream port")
    servers = "".join(f"\n        server 127.0.0.1:{port};" for port in upstream_ports)
    return f"""
    map $http_upgrade $lb_connection {{
        default upgrade;
        '' '';
    }}
    upstream instances {{{servers}
        keepalive {keepalive};
        keepalive_requests 100000;
        keepalive_timeout {nginx_time(UPSTREAM_KEEPALIVE_TIMEOUT_S)};
    }}
    server {{
        {listen_directive(listen_host, listen_port)}
        {client_timeout_directives(head_timeout_s, body_timeout_s)}
        location / {{
            proxy_pass http://instances;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $lb_connection;  # "" unless upgrading
            proxy_read_timeout 3600s;  # idle WebSocket agents
        }}
    }}
"""

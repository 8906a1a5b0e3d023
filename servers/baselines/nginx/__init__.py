"""The nginx baseline (`python -m servers nginx ...`) and the nginx config helpers.

nginx has no telemetry of its own, so this wrapper renders a config into a private
temporary directory (`config`: `nginx.conf.template` plus the block helpers), runs nginx as
its child (`process`) and writes the contract's telemetry line once a second for it
(`telemetry`): open connections and total requests come from `stub_status` on a second,
loopback-only server block, RSS is the sum over the nginx master and workers (psutil).
CPU affinity is inherited, so `taskset -c 0 python -m servers nginx ...` pins nginx too
(`baseline`: the entry point).

`--protocol` changes only the public listener (LISTEN_PARAMETERS): h1-tls and h2 serve the
given certificate over TLS 1.3 only, h2c speaks HTTP/2 to clients with prior knowledge;
the routes, the deadlines and the telemetry are the same over each.

The same helpers render the reverse proxy of the `lb:N` topology (harness/services/balancer.py),
so nginx config is written in one place. Plain Python: the harness may import this module.

With `--workers N` nginx runs N worker processes behind one stub_status, which cannot
split its counts by worker. The wrapper still writes one line per worker (the harness
waits for every worker's first line): worker 0's line carries the wrapper's pid, nginx's
totals and the master's RSS plus its worker's; worker i's line carries nginx worker i's pid
and RSS and zero counts, so summing the lines (harness/monitor.py) gives nginx's totals.
"""

from __future__ import annotations

from servers.baselines.nginx.baseline import main
from servers.baselines.nginx.config import (
    BAD_REQUEST_PATH,
    LISTEN_PARAMETERS,
    MAX_WORKER_CONNECTIONS,
    STATUS_PATH,
    TEMPLATE_PATH,
    UPSTREAM_KEEPALIVE,
    UPSTREAM_KEEPALIVE_TIMEOUT_S,
    baseline_server_block,
    client_timeout_directives,
    listen_address,
    listen_directive,
    nginx_time,
    proxy_blocks,
    quote,
    render_config,
    render_template,
    status_server_block,
    tls_directives,
    types_block,
)
from servers.baselines.nginx.process import (
    PORT_ATTEMPTS,
    PORT_TAKEN,
    READY_TIMEOUT_S,
    Nginx,
    NginxError,
    Site,
    nginx_binary,
    start_nginx,
)
from servers.baselines.nginx.telemetry import StubStatus, telemetry_lines
from servers.listeners import free_port  # nginx cannot listen on port 0

# What the harness (the `lb:N` balancer), `python -m servers` and the tests use: the config
# helpers (config), the process (process), the baseline's telemetry and its entry point.
__all__ = [
    "BAD_REQUEST_PATH",
    "LISTEN_PARAMETERS",
    "MAX_WORKER_CONNECTIONS",
    "PORT_ATTEMPTS",
    "PORT_TAKEN",
    "READY_TIMEOUT_S",
    "STATUS_PATH",
    "TEMPLATE_PATH",
    "UPSTREAM_KEEPALIVE",
    "UPSTREAM_KEEPALIVE_TIMEOUT_S",
    "Nginx",
    "NginxError",
    "Site",
    "StubStatus",
    "baseline_server_block",
    "client_timeout_directives",
    "free_port",
    "listen_address",
    "listen_directive",
    "main",
    "nginx_binary",
    "nginx_time",
    "proxy_blocks",
    "quote",
    "render_config",
    "render_template",
    "start_nginx",
    "status_server_block",
    "telemetry_lines",
    "tls_directives",
    "types_block",
]

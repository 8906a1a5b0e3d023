"""The nginx load balancer of the `lb:N` topology (the process-model study: servers behind nginx).

nginx proxies round robin to N server instances on 127.0.0.1 and keeps its upstream
connections alive (HTTP/1.1, empty Connection header), so the instances see the load, not
connection churn. It runs under `taskset -c` on its own CPUs, on a free loopback port, from
a config rendered by servers.baselines.nginx (the same helpers as the nginx baseline), in its own
process group so that a stop never leaves a worker behind.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

from drivers.processes import child_setup
from model.errors import UserError
from servers.baselines import nginx
from servers.contract import SHUTDOWN_GRACE_S

LISTEN_HOST = "127.0.0.1"


class LoadBalancer:
    """nginx in front of `upstream_ports`, as a context manager exposing `.port` and `.pid`.

    `cpus` is a taskset CPU list for nginx (None: not pinned); `workers` its worker count;
    `cgroup_procs` the `cgroup.procs` files of the group it runs in (the servers').
    """

    def __init__(
        self,
        upstream_ports: list[int],
        cpus: str | None,
        workers: int = 1,
        listen_host: str = LISTEN_HOST,
        cgroup_procs: Sequence[str] = (),
    ) -> None:
        if not upstream_ports:
            raise ValueError("a load balancer needs at least one upstream port")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.upstream_ports = list(upstream_ports)
        self.cpus = cpus
        self.workers = workers
        self.listen_host = listen_host  # its instances stay on loopback behind it
        self.cgroup_procs = list(cgroup_procs)  # the server's cgroup: nginx joins it too
        self.port = 0
        self._nginx: nginx.Nginx | None = None

    @property
    def pid(self) -> int:
        """The nginx master's pid (its workers are its children)."""
        if self._nginx is None:
            raise RuntimeError("the load balancer is not running")
        return self._nginx.pid

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    def pids(self) -> Sequence[int]:
        """The master's and the workers' pids (for the monitor's process tree)."""
        return [] if self._nginx is None else [p.pid for p in self._nginx.processes()]

    def poll(self) -> int | None:
        """nginx's exit status once its master has exited (None while it runs or before
        `start`)."""
        return None if self._nginx is None else self._nginx.process.poll()

    def start(self) -> LoadBalancer:
        """Start nginx and wait until it answers on `.port`; UserError if it cannot."""
        if self._nginx is not None:
            return self

        def render() -> nginx.Site:
            port = nginx.free_port(self.listen_host)
            blocks = nginx.proxy_blocks(self.listen_host, port, self.upstream_ports)
            return nginx.Site(blocks, self.listen_host, port)

        try:
            self._nginx, site = nginx.start_nginx(
                render,
                workers=self.workers,
                cpus=self.cpus,
                new_session=True,
                # if the harness dies, nginx's master stops its workers (SIGTERM)
                preexec_fn=child_setup(signal.SIGTERM, self.cgroup_procs),
            )
        except nginx.NginxError as error:
            raise UserError(f"load balancer: {error}") from error
        self.port = site.probe_port
        return self

    def stop(self) -> int | None:
        """Graceful QUIT, then TERM, then the group killed; returns nginx's exit status."""
        if self._nginx is None:
            return None
        status = self._nginx.stop(SHUTDOWN_GRACE_S)
        self._nginx = None
        return status

    def __enter__(self) -> LoadBalancer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

"""Process models (the process-model study): how many server processes answer, and who
spreads the load.

- `single`: one server process;
- `workers:N`: one server with its own `--workers N` (SO_REUSEPORT, or Node's cluster);
- `lb:N`: N server instances on their own ports, each pinned to its own CPU set, behind a
  harness-rendered nginx load balancer (`harness.services.balancer`);
- `lb:N/workers:M`: the same, each instance running M workers.

`start_topology` returns a `Topology` that the runner uses exactly like one server process:
one URL, every process to watch, all telemetry, one stop.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drivers.processes import how_it_ended
from harness import affinity as cpu_affinity
from harness.cgroups.groups import Cgroup
from harness.server_process import ServerProcess, start_server
from harness.tls import Certificates
from model.errors import UserError
from servers.contract import PROTOCOL_H1

_MODEL = re.compile(r"single|workers:(\d+)|lb:(\d+)(?:/workers:(\d+))?")


@dataclass(frozen=True)
class ProcessModel:
    """A parsed `--process-model`: instances behind a balancer, workers per instance."""

    name: str
    instances: int = 1
    workers: int = 1
    balanced: bool = False

    @property
    def processes(self) -> int:
        return self.instances * self.workers


def parse_process_model(text: str) -> ProcessModel:
    """`single`, `workers:N`, `lb:N` or `lb:N/workers:M`; ValueError names a bad one."""
    match = _MODEL.fullmatch(text.strip())
    counts = [int(g) for g in match.groups() if g is not None] if match else []
    if match is None or any(n < 1 for n in counts):
        raise ValueError(f"process model {text!r} is not single, workers:N, lb:N or lb:N/workers:M")
    workers, instances, instance_workers = match.groups()
    if workers:
        return ProcessModel(text, workers=int(workers))
    if instances:
        return ProcessModel(
            text, instances=int(instances), workers=int(instance_workers or 1), balanced=True
        )
    return ProcessModel("single")


def parse_process_models(text: str) -> list[ProcessModel]:
    """A comma-separated list of process models (a profile may compare several)."""
    models = [parse_process_model(part) for part in text.split(",") if part.strip()]
    if not models:
        raise ValueError("no process model given")
    return models


class _AnyExited:
    """`poll()`/`returncode` over several processes and the balancer: the first one that
    has exited (a balancer that died ends the case as a dead server does)."""

    def __init__(self, servers: Sequence[ServerProcess], balancer: Any = None) -> None:
        self._servers = servers
        self._balancer = balancer

    def exit_reason(self) -> str | None:
        """Which process is gone and how ("load balancer killed by SIGKILL"); None if none."""
        for server in self._servers:
            code = server.process.poll()
            if code is not None:
                return f"server {how_it_ended(code)}"
        code = self._balancer.poll() if self._balancer is not None else None
        return None if code is None else f"load balancer {how_it_ended(code)}"

    def poll(self) -> int | None:
        for server in self._servers:
            code = server.process.poll()
            if code is not None:
                return code
        return self._balancer.poll() if self._balancer is not None else None

    @property
    def returncode(self) -> int | None:
        return self.poll()


class Topology:
    """Running server instances (and their balancer) seen as one server by the runner."""

    def __init__(
        self,
        model: ProcessModel,
        servers: list[ServerProcess],
        balancer: Any = None,
        instance_cpus: Sequence[str | None] = (),
        balancer_cpus: str | None = None,
    ) -> None:
        self.model = model
        self.servers = servers
        self.balancer = balancer
        self.instance_cpus = list(instance_cpus)
        self.balancer_cpus = balancer_cpus
        self.process = _AnyExited(servers, balancer)

    @property
    def pid(self) -> int:
        return self.servers[0].pid

    @property
    def pids(self) -> list[int]:
        """Every process to watch: instances (their workers are children) and the balancer."""
        pids = [server.pid for server in self.servers]
        if self.balancer is not None:
            pids.append(self.balancer.pid)
        return pids

    @property
    def port(self) -> int:
        return self.balancer.port if self.balancer is not None else self.servers[0].port

    @property
    def host(self) -> str:
        """The address the server (or its balancer) listens on."""
        return self.balancer.listen_host if self.balancer is not None else self.servers[0].host

    @property
    def protocol(self) -> str:
        """What the server speaks on its port (a balancer: cleartext h1 only)."""
        return self.servers[0].protocol

    @property
    def url(self) -> str:
        if self.balancer is None:
            return self.servers[0].url
        return f"http://{self.host}:{self.port}"

    @property
    def instance_url(self) -> str:
        """The first server instance itself, not the balancer in front of it."""
        return self.servers[0].url

    @property
    def workers(self) -> int:
        """Server processes answering (what the open-file limit multiplies by)."""
        return self.model.processes

    def telemetry_lines(self) -> list[dict[str, Any]]:
        return [line for server in self.servers for line in server.telemetry_lines()]

    def latest_telemetry(self) -> dict[int, dict[str, Any]]:
        latest: dict[int, dict[str, Any]] = {}
        for server in self.servers:
            latest.update(server.latest_telemetry())
        return latest

    def mc_port(self) -> int:
        """The memcached socket service's port (on the first instance; never balanced)."""
        for line in self.servers[0].telemetry_lines():
            if line.get("mc_port"):
                return int(line["mc_port"])
        raise UserError("the server reports no --mc-socket-port in its telemetry")

    def stderr_tail(self, limit_chars: int = 400) -> str:
        return " | ".join(server.stderr_tail(limit_chars) for server in self.servers)

    def describe(self) -> dict[str, Any]:
        """What a result records: each instance's port and CPUs, the balancer's."""
        described: dict[str, Any] = {
            "model": self.model.name,
            "instances": [
                {"port": server.port, "cpus": cpus, "workers": self.model.workers}
                for server, cpus in zip(self.servers, self.instance_cpus, strict=False)
            ],
        }
        if self.balancer is not None:
            described["balancer"] = {
                "kind": "nginx",
                "port": self.balancer.port,
                "cpus": self.balancer_cpus,
            }
        return described

    def stop(self, timeout_s: float | None = None) -> int:
        """Stop the balancer first, then every instance; the worst exit status.

        Whatever interrupts it, every instance not yet stopped is killed on the way out.
        """
        try:
            if self.balancer is not None:
                with contextlib.suppress(Exception):
                    self.balancer.stop()
            statuses = [
                server.stop() if timeout_s is None else server.stop(timeout_s)
                for server in self.servers
            ]
        finally:
            for server in self.servers:
                if server.process.returncode is None:
                    server.kill()
        return max(statuses, key=lambda code: code != 0)

    def __enter__(self) -> Topology:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def instance_cpu_sets(server_cpus: str | None, instances: int) -> list[str | None]:
    """Each instance's own CPU set: the server CPUs dealt out round robin (shared when
    there are fewer CPUs than instances, as on a 2-core machine — recorded per case)."""
    if server_cpus is None:
        return [None] * instances
    cpus = cpu_affinity.parse_cpu_list(server_cpus)
    return [cpu_affinity.format_cpu_list([cpus[i % len(cpus)]]) for i in range(instances)]


# why a balanced process model runs cleartext HTTP/1.1 only (a case on another protocol
# is `skipped: not supported: …`)
BALANCER_PROTOCOL_NOTE = (
    "the lb:N balancer (nginx) proxies cleartext HTTP/1.1 only; TLS or HTTP/2 at the "
    "balancer is not built"
)


def topology_unsupported(model: ProcessModel, protocol: str) -> str | None:
    """Why `model` cannot run a case on `protocol`, or None."""
    if model.balanced and protocol != PROTOCOL_H1:
        return BALANCER_PROTOCOL_NOTE
    return None


def start_topology(
    framework: str,
    model: ProcessModel,
    *,
    sink: str = "empty",
    loop: str | None = None,
    server_cpus: str | None = None,
    extra_args: Sequence[str] = (),
    host: str = "127.0.0.1",
    protocol: str = PROTOCOL_H1,
    certificates: Certificates | None = None,
    cgroup: Cgroup | None = None,
    environment: Mapping[str, str] | None = None,
) -> Topology:
    """Start the instances (and the balancer) of `model` listening on `host` (the balancer
    there, its instances behind it on loopback), speaking `protocol`; everything is stopped
    on failure. With `cgroup` every process joins it; its cpuset pins a single instance
    (no taskset then), while the instances of `lb:N` keep their own CPU sets by taskset
    inside it. Every instance gets `environment` added to its own."""
    why = topology_unsupported(model, protocol)
    if why is not None:
        raise UserError(f"not supported: {why}")
    if not model.balanced:
        server = start_server(
            framework,
            sink=sink,
            workers=model.workers,
            loop=loop,
            cpus=server_cpus if cgroup is None or cgroup.cpus is None else None,
            extra_args=extra_args,
            host=host,
            protocol=protocol,
            certificates=certificates,
            cgroup=cgroup,
            environment=environment,
        )
        return Topology(model, [server], instance_cpus=[server_cpus])
    from harness.services.balancer import LoadBalancer

    cpu_sets = instance_cpu_sets(server_cpus, model.instances)
    servers: list[ServerProcess] = []
    try:
        for cpus in cpu_sets:
            servers.append(
                start_server(
                    framework,
                    sink=sink,
                    workers=model.workers,
                    loop=loop,
                    cpus=cpus,
                    extra_args=extra_args,
                    cgroup=cgroup,
                    environment=environment,
                )
            )
        balancer = LoadBalancer(
            [server.port for server in servers],
            server_cpus,
            listen_host=host,
            cgroup_procs=cgroup.procs_files if cgroup is not None else (),
        )
        balancer.__enter__()
    except BaseException:
        try:
            for server in servers:
                server.stop()
        finally:
            for server in servers:
                if server.process.returncode is None:
                    server.kill()
        raise
    return Topology(model, servers, balancer, cpu_sets, server_cpus)

"""What several commands share: the console, the options of compare (which run takes too;
bench and verify share some), and the checks of option values that need no work module.
The same name means the same thing in every command: `--results DIR` is the results root,
`--sink` and `--sinks` are one option, `--load-cpus` the load generator's CPUs."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

from drivers import DRIVERS
from harness.secrets import keep_url
from model.errors import UserError
from model.results import READ_ERRORS, Run, read_run
from servers.contract import MONGO_URL_ENV, SINKS

# Not a terminal (CI, a pipe): wide enough that tables keep their columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def parse_sinks(spec: str) -> list[str]:
    """`empty,file` as a list of sinks; an unknown one is a UserError naming the known ones."""
    sinks = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in sinks if s not in SINKS]
    if unknown or not sinks:
        raise UserError(
            f"unknown sink {', '.join(unknown) or repr(spec)}: choose from {', '.join(SINKS)}"
        )
    return sinks


def check_cpus(spec: str) -> str:
    """`spec` itself once it names CPUs this process may use (UserError otherwise)."""
    from harness.affinity import parse_cpu_list

    parse_cpu_list(spec)
    return spec


def read_run_arg(path: Path) -> Run:
    """The run a command was given (its directory or its run.json); UserError naming the
    path when there is none or it cannot be read."""
    file = path / "run.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{path} holds no run.json: give a results/<run-id> directory")
    try:
        return read_run(file)
    except READ_ERRORS as error:
        raise UserError(f"{file}: {error}") from None


FRAMEWORKS_OPTION = typer.Option(
    "all", help="all, baselines, or a comma-separated list of frameworks and baselines."
)
# run's old spelling (`harness run --framework NAME`), still accepted, no longer shown
FRAMEWORK_ALIAS_OPTION = typer.Option(None, "--framework", hidden=True)
PROFILE_OPTION = typer.Option(
    "quick", help="A shipped profile (harness/profiles/*.toml), or a profile file (mine.toml)."
)
SERVER_OPTION = typer.Option(
    [],
    "--server",
    help="Also compare a server given as a command: 'NAME=COMMAND', with placeholders "
    "{host} {port} (and {sink} {sink_path} {files_dir} {memcached} ...). Repeatable.",
)
SERVERS_FILE_OPTION = typer.Option(
    None, "--servers", help="A TOML file whose [servers] table gives servers as commands."
)
SCENARIO_OPTION = typer.Option(
    None, help="Override the profile's scenario (see `harness list --scenarios`)."
)
SINK_OPTION = typer.Option(
    None, "--sink", "--sinks", help="Override the sink (empty, file, mongo)."
)
DRIVER_OPTION = typer.Option(None, help=f"Override the driver ({', '.join(DRIVERS)}).")
REPEAT_OPTION = typer.Option(None, help="Run every case N times, interleaved; medians kept.")
DURATION_OPTION = typer.Option(None, "--duration", help="Seconds per step.")
AFFINITY_OPTION = typer.Option(None, help="both, server, agent, none, or matrix (all four).")
MODEL_OPTION = typer.Option(
    None,
    "--process-model",
    help="single, workers:N, lb:N or lb:N/workers:M; a comma-separated list compares several.",
)
PROTOCOL_OPTION = typer.Option(
    None,
    "--protocol",
    help="h1 (default), h1-tls, h2 or h2c; a comma-separated list (h1,h1-tls) runs every "
    "server on each.",
)
TLS_CERT_OPTION = typer.Option(
    None, "--tls-cert", help="Your PEM certificate for the TLS cases (default: a throwaway CA's)."
)
TLS_KEY_OPTION = typer.Option(None, "--tls-key", help="The PEM private key of --tls-cert.")
LOOP_OPTION = typer.Option(None, help="asyncio or uvloop, for aiohttp and tornado.")
SET_OPTION = typer.Option(
    [],
    "--set",
    help="Profile override key=value (ramp.stop=100), over the profile, under the named "
    "options; an unknown key is refused with the keys there are. Repeatable.",
)
SERVER_CPUS_OPTION = typer.Option(None, help="CPUs for the server (default: the first).")
LOAD_CPUS_OPTION = typer.Option(None, help="CPUs for the load generator (default: the rest).")
# The load CPUs' old name in compare and run, still accepted, no longer shown.
AGENT_CPUS_OPTION = typer.Option(None, "--agent-cpus", hidden=True)
RESULTS_ROOT_OPTION = typer.Option(
    None,
    "--results",
    help="The results directory: each run's folder goes in it (default: results/).",
    metavar="DIR",
)
# --results' old name in compare and run, still accepted, no longer shown
OUT_ALIAS_OPTION = typer.Option(None, "--out", hidden=True)
RESULTS_OPTION = typer.Option(Path("results"), "--results", help="The results directory.")
CPU_PROFILE_OPTION = typer.Option(
    False,
    "--cpu-profile",
    help="One more round at each case's peak (kept out of the intervals) with the server's "
    "process tree sampled (py-spy for Python, perf otherwise): where its CPU µs per request "
    "go, in the console, Markdown and report; stacks in profiled-round/profile.folded.",
)
NO_VERIFY_OPTION = typer.Option(False, "--no-verify", help="Skip the verify pass.")
# its password is learned as a secret at once (harness.secrets): hidden in all the run writes
MONGO_URL_OPTION = typer.Option(
    None,
    help="A real MongoDB (default: FerretDB started here). Also read from "
    f"{MONGO_URL_ENV}, which keeps its password off the harness's own command line.",
    callback=keep_url,
    envvar=MONGO_URL_ENV,
    show_envvar=False,
)
MONGO_BACKEND_OPTION = typer.Option(
    None,
    help="What the FerretDB started here runs on: postgresql (default when installed) or sqlite.",
)
DB_CPUS_OPTION = typer.Option(None, help="CPUs for FerretDB and PostgreSQL (default: not pinned).")
MONGO_W_OPTION = typer.Option(None, help="Write concern of the mongo sink: 0 or 1.")
MONGO_BATCH_OPTION = typer.Option(
    None,
    help="Records per insert_many of the mongo sink's group commit (1: one insert per record).",
)
DURABLE_OPTION = typer.Option(
    False,
    "--durable",
    help="Acknowledge a record once on disk: fsync per file batch, mongo j: true.",
)
PRECISION_OPTION = typer.Option(
    None,
    "--precision",
    help="Rounds go on until every case's peak is within ±PCT % (its 95 % interval), or "
    "--max-time is spent; 0: the profile's rounds, no more (quick: ±5 %, at least 4 rounds).",
    metavar="PCT",
)
MAX_TIME_OPTION = typer.Option(
    None,
    "--max-time",
    help="The run's time budget in seconds for --precision (0: none; quick: 450).",
    metavar="SECONDS",
)
CONNECTIONS_OPTION = typer.Option(None, help="Connection ramp target (WebSocket scenarios).")
THRESHOLD_OPTION = typer.Option(
    [],
    "--threshold",
    help="A rule the run must meet, e.g. 'aiohttp: peak >= 20000', '*: errors == 0', "
    "'aiohttp[h1-tls]: peak >= 10000' (one protocol's case; repeatable; added to the "
    "profile's [thresholds]); exit status 3 when one fails.",
)
MODE_OPTION = typer.Option(
    None, help="Connection ramps: load (hold each step) or stress (stop at the breaking point)."
)
FLEET_OPTION = typer.Option(
    None,
    "--fleet",
    help="Drive the load from a Dask fleet's hosts: tls://SCHEDULER:PORT (with --fleet-ca, "
    "--fleet-cert, --fleet-key) or local:N (namespace hosts; root).",
)
FLEET_CA_OPTION = typer.Option(
    None, "--fleet-ca", help="With --fleet tls://: the fleet CA's certificate (PEM)."
)
FLEET_CERT_OPTION = typer.Option(
    None,
    "--fleet-cert",
    help="With --fleet tls://: the harness's certificate from that CA (harness fleet cert).",
)
FLEET_KEY_OPTION = typer.Option(None, "--fleet-key", help="With --fleet tls://: its key (PEM).")
INSECURE_FLEET_OPTION = typer.Option(
    False,
    "--insecure-fleet",
    help="Accept --fleet tcp:// (no encryption, no authentication: anyone who reaches the "
    "scheduler runs code on its hosts). Warned on every use, recorded in run.json.",
)
SERVER_ADDRESS_OPTION = typer.Option(
    None,
    "--server-address",
    help="With --fleet: the address servers listen on, which the load hosts reach "
    "(default: the local fleet's bridge, or this machine's address toward the scheduler).",
)
JUNIT_OPTION = typer.Option(
    None,
    "--junit",
    help="Also write the result as JUnit XML to FILE (each case, threshold or verdict a test).",
)
MARKDOWN_OPTION = typer.Option(
    None,
    "--markdown",
    help="Also write the summary as Markdown to FILE (a CI job's step summary).",
)
STRICT_VERIFY_OPTION = typer.Option(
    False,
    "--strict-verify",
    help="Fail a server on any deviation it does not declare (oversized headers accepted, "
    "a lenient framing rule), not only on a wrong answer.",
)
CPU_QUOTA_OPTION = typer.Option(
    None,
    "--cpu-quota",
    help="Cap each server's cgroup at this many cores (0.5: half a core, as a pod's CPU "
    "limit: cpu.max / cfs_quota); throttled steps are flagged `throttled`.",
    metavar="CORES",
)
MEMORY_MAX_OPTION = typer.Option(
    None,
    "--memory-max",
    help="Cap each server's cgroup's memory (512M, 1G), as a pod's memory limit; an "
    "out-of-memory kill fails that case with its reason.",
    metavar="SIZE",
)

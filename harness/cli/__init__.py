"""The `harness` command line: parses and dispatches only; the work lives in its modules.

One module per command (`harness/cli/<command>.py`), registered here. A user's mistake
raises UserError, caught once in `main()`: one line, exit status 1 (2 for a UsageError:
a command line the harness cannot read, as typer's own usage errors).
"""

from __future__ import annotations

import sys

import typer

from harness.cli.bench import bench_app
from harness.cli.clean import clean_command
from harness.cli.compare import compare_command
from harness.cli.crosscheck import crosscheck_command
from harness.cli.diff import diff_command
from harness.cli.doctor import doctor_command
from harness.cli.fleet import fleet_app
from harness.cli.history import history_command
from harness.cli.list import list_command
from harness.cli.live_options import with_default_ports
from harness.cli.plan_connections import plan_connections_command
from harness.cli.publish import publish_command
from harness.cli.report import report_command
from harness.cli.run import run_command
from harness.cli.trend import trend_command
from harness.cli.verify import verify_command
from harness.lifecycle import kill_leftover_children, signals_as_interrupts
from harness.secrets import redact
from model.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help text is plain: rich markup would eat '[servers]' and 'aiohttp[h1-tls]'.
    rich_markup_mode=None,
    help="Compare web-server frameworks fairly: identical load, pinned CPUs, telemetry.",
)
app.command("list")(list_command)
app.command("doctor")(doctor_command)
app.command("clean")(clean_command)
app.command("verify")(verify_command)
app.add_typer(bench_app, name="bench")
app.command("compare")(compare_command)
app.command("run")(run_command)
app.command("report")(report_command)
app.command("diff")(diff_command)
app.command("history")(history_command)
app.command("trend")(trend_command)
app.command("publish")(publish_command)
app.command("plan-connections")(plan_connections_command)
app.command("crosscheck")(crosscheck_command)
app.add_typer(fleet_app, name="fleet")


def main() -> None:
    """Console-script entry: run the app; a UserError becomes one line and its exit
    status (1; a UsageError 2).

    Ctrl-C, SIGTERM and SIGHUP stop any command alike (harness.lifecycle): everything it
    started is stopped, and the exit status is 128 + the signal's number.
    """
    from harness.frameworks import load_registry

    load_registry()  # the plugins' frameworks (servers.plugins)
    with signals_as_interrupts() as stopping:
        try:
            app(args=with_default_ports(sys.argv[1:]))  # usage errors: typer's, status 2
        except UserError as error:
            print(f"harness: error: {redact(str(error))}", file=sys.stderr)
            sys.exit(error.exit_status)
        except SystemExit:
            if stopping.signum is not None:  # click turns an interrupt into status 1
                sys.exit(128 + stopping.signum)
            raise
        finally:
            left = kill_leftover_children()
            if left:
                print(f"harness: killed processes left running: {left}", file=sys.stderr)

"""nox sessions: tests, lint, compare, and bench-<framework> (one per framework, and one
per contender: servers/contenders).

Each session installs what it needs: the package with every framework into its virtualenv,
and the system load tools through `harness doctor --install`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from servers import FRAMEWORKS, contenders

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True
PYTHON = "3.11"


def install(session: nox.Session) -> None:
    session.install("-e", ".[all,contenders,test]")
    session.run("harness", "doctor", "--install")


# The default run in two phases: the tests that may share the machine on TEST_WORKERS
# pytest-xdist workers (a file's tests stay together on one worker), then the `serial`
# ones alone (they read CPU shares, pin busy loops, or hold state one per machine: the
# fleet, leftovers). Two workers for this project's 2-core machine; more would put more
# servers on the pinned server CPU at once.
TEST_WORKERS = 2


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite (slow end-to-end runs excluded). Arguments go to one pytest run as
    given (`nox -s tests -- tests/unit`, `-- -m slow`), without the two phases."""
    install(session)
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    workers = ["-n", str(TEST_WORKERS), "--dist", "loadfile"]
    session.run("pytest", *workers, "-m", "not slow and not serial")
    session.run("pytest", "-m", "not slow and serial")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and format check; import contracts (pyproject's [tool.importlinter]);
    module and function sizes (tools/check_sizes.py)."""
    session.install("ruff", "import-linter")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run("python", "tools/check_sizes.py")


@nox.session(python=PYTHON)
def compare(session: nox.Session) -> None:
    """The main job: `harness compare` of every framework on the default (quick) profile."""
    install(session)
    session.run("harness", "compare", "--frameworks", "all", *session.posargs)


def _bench_session(framework: str) -> None:
    @nox.session(python=PYTHON, name=f"bench-{framework}")
    def bench(session: nox.Session) -> None:
        install(session)
        session.run("harness", "verify", "--frameworks", framework)
        session.run("harness", "bench", "--frameworks", framework)
        session.run("harness", "compare", "--frameworks", framework, *session.posargs)

    bench.__doc__ = (
        f"{framework}: verify; wrk against our server and the minimal app; the quick profile."
    )


for _name, _framework in FRAMEWORKS.items():
    if _framework.role == "framework":  # baselines have no minimal app to measure against
        _bench_session(_name)
for _contender in contenders.frameworks():  # plugins: registered by the installed package
    _bench_session(_contender.name)

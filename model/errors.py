"""The errors a user's mistake raises: caught once in `harness.cli.main`, never a traceback."""


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the problem and the fix."""

    exit_status = 1


class UsageError(UserError):
    """A command line the harness cannot read: an unknown `--set` key, a value of the
    wrong kind. Exit status 2, as typer's own usage errors."""

    exit_status = 2

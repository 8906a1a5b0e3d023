"""The one error a user's mistake raises: caught once in `harness.cli.main`, never a traceback."""


class UserError(Exception):
    """A problem the user can fix; its message is one line naming the problem and the fix."""

"""Errors a user can cause, printed by the CLI as one line without a traceback."""


class UserError(Exception):
    """Bad input from a user: a malformed file, an unknown name, an invalid option.

    The message must say what was wrong and where (file, line, field, request id).
    """

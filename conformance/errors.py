"""Errors a user can cause, printed by the CLI as one line without a traceback.

The types live in `vtwin.errors` (below every layer); this module keeps the old import path."""

from vtwin.errors import IntegrityError, UserError

__all__ = ["IntegrityError", "UserError"]

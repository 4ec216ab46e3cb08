"""The planner's error: a configuration the planner (like upstream's) refuses to plan.

It is a `UserError`, so the CLI prints it as one line, and a `ValueError`, because upstream's
planner raises `ValueError` for the same configurations; the differential tests compare the two
classes. Where upstream fails with another class (an `assert` deep in its layout code),
`upstream_class` names it, so the comparison can still be exact about which refusal it is.
"""

from __future__ import annotations

from vtwin.errors import UserError


class PlanError(UserError, ValueError):
    """`field: problem (got X)`; `upstream_class` is the exception class upstream raises."""

    def __init__(self, field: str, problem: str, upstream_class: str = "ValueError") -> None:
        self.field = field
        self.problem = problem
        self.upstream_class = upstream_class
        super().__init__(f"{field}: {problem}")

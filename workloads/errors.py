"""One-line error messages that name the file, the line and the field.

Whoever reads a rejected workload or trace needs to jump straight to the bad spot, so every
problem becomes ``FILE:LINE: field 'a.b[3]': what is wrong`` (or ``FILE:LINE: what is wrong``
when no single field is at fault, as with a line that is not JSON). The CLI prints it after
``vtwin: error:`` without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from vtwin.errors import UserError

_MAX_INPUT_REPR = 60


class WorkloadError(UserError):
    """A malformed workload or trace file, located by file, line and field."""

    def __init__(self, source: str | Path, line: int | None, field: str | None, problem: str):
        self.source = str(source)
        self.line = line
        self.field = field
        self.problem = _one_line(problem)
        where = self.source if line is None else f"{self.source}:{line}"
        what = self.problem if field is None else f"field '{field}': {self.problem}"
        super().__init__(f"{where}: {what}")


TAGGED_UNION_FIELDS = frozenset({"kv_connector"})
"""Fields whose value is one of several models picked by its `type`: pydantic puts the chosen
model's tag after the field name in an error's location, which no file spells, so it is left
out of the path."""
TAGGED_UNION_LISTS = frozenset({"connectors"})
"""The same for lists of such values: the tag follows the item's index."""


def field_path(loc: Sequence[int | str], prefix: str = "") -> str:
    """Render a pydantic location like ``("prompt", "segments", 2, "length")``."""
    out = prefix
    for index, part in enumerate(loc):
        if isinstance(part, str) and 0 < index < len(loc) - 1 and (
                loc[index - 1] in TAGGED_UNION_FIELDS
                or (index > 1 and isinstance(loc[index - 1], int)
                    and loc[index - 2] in TAGGED_UNION_LISTS)):
            continue  # the union member's tag
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out or "(record)"


def from_validation_error(
    err: ValidationError, source: str | Path, line: int, prefix: str = ""
) -> WorkloadError:
    """The first problem pydantic found, as a `WorkloadError`; the rest are counted."""
    errors = err.errors(include_url=False)
    first = errors[0]
    problem = str(first["msg"])
    loc = tuple(first["loc"])
    if first["type"] == "union_tag_invalid":
        context = first.get("ctx", {})
        loc += (str(context.get("discriminator", "type")).strip("'"),)
        problem = (f"must be one of {context.get('expected_tags')} "
                   f"(got {context.get('tag')!r})")
    elif first["type"] == "missing":
        problem = "required field is missing"
    elif first["type"] == "extra_forbidden":
        problem = "unknown field"
    elif "input" in first and first["type"] not in ("value_error", "assertion_error",
                                                    "union_tag_invalid"):
        problem += f" (got {_short_repr(first['input'])})"
    if first["type"] == "value_error" and problem.startswith("Value error, "):
        problem = problem[len("Value error, ") :]
    if len(errors) > 1:
        more = len(errors) - 1
        problem += f"; and {more} more problem{'s' if more > 1 else ''} on this line"
    return WorkloadError(source, line, field_path(loc, prefix), problem)


def _short_repr(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_INPUT_REPR:
        text = text[: _MAX_INPUT_REPR - 3] + "..."
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split())

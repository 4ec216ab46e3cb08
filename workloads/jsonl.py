"""Strict JSON Lines reading shared by workload files and Mooncake traces.

Files are data: they are parsed with `json` only, never unpickled or evaluated. The parser is
stricter than `json.loads` by default: ``NaN``/``Infinity`` and repeated keys in one object are
errors, since both silently change what a record means.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def parse_object(text: str, source: str | Path, line: int) -> dict[str, Any]:
    """Parse one line that must hold a JSON object."""
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_object_without_duplicates,
        )
    except _DuplicateKey as err:
        raise WorkloadError(source, line, err.key, "key appears twice in one record") from None
    except json.JSONDecodeError as err:
        problem = f"invalid JSON at column {err.colno}: {err.msg}"
        raise WorkloadError(source, line, None, problem) from None
    except (ValueError, RecursionError) as err:
        raise WorkloadError(source, line, None, f"invalid JSON: {err}") from None
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise WorkloadError(source, line, None, f"a record must be a JSON object, got {kind}")
    return value


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line of a UTF-8 file."""
    try:
        handle = path.open("rb")
    except OSError as err:
        raise WorkloadError(path, None, None, f"cannot read file: {err.strerror}") from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise WorkloadError(path, number, None, "line is not valid UTF-8") from None
            if text.strip():
                yield number, text.rstrip("\r\n")


def split_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line of an in-memory document."""
    # Split on "\n" only: `str.splitlines` would also split inside strings at U+2028 and friends.
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line.rstrip("\r")

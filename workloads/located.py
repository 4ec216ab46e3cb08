"""`Located`: a validated record with the line of the workload file it came from, so every
later check can name the line in its one-line error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Located(Generic[T]):
    """A validated record and the line it came from."""

    line: int
    record: T

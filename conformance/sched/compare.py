"""The comparer: the first divergence between two streams of `StepRecord`s, at one level.

Levels, strictest first:

* ``exact``: every field of every record is equal (the free queue's head and the cached-block
  digest only where both systems report them);
* ``renamed``: as exact, except that physical block ids (`new_block_ids`, `block_tables`) only
  have to agree up to one bijection, fixed the first time a pair of ids meets and kept for the
  whole run (a pool that hands out the same blocks under other numbers passes; one that reuses
  blocks in another order does not);
* ``schedule``: only what the schedule decides: tokens per request, preemptions, finishes.

Fields are compared in `StepRecord.to_json()` order and, inside a field, depth first, so the
reported path (``block_tables.r-3[0][5]``) is the first difference a reader would find.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from conformance.sched.record import (
    BLOCK_ID_FIELDS,
    FREE_QUEUE_FIELDS,
    REQUEST_KEYED_FIELDS,
    SCHEDULE_FIELDS,
    StepRecord,
)
from vtwin.errors import UserError

LEVELS: tuple[str, ...] = ("exact", "renamed", "schedule")
ABSENT = "<absent>"
"""Stands for a dict key or list item that one side has and the other lacks."""


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise UserError(f"unknown level {level!r} (known: {', '.join(LEVELS)})")
    return level


def stricter_or_equal(level: str, than: str) -> bool:
    return LEVELS.index(level) <= LEVELS.index(than)


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first difference at one level: where, both values, and what led up to it."""

    workload: str
    level: str
    step: int
    field: str
    left: Any
    right: Any
    left_record: dict[str, Any] | None
    right_record: dict[str, Any] | None
    preceding: tuple[tuple[dict[str, Any], dict[str, Any]], ...]
    requests: tuple[str, ...]

    @property
    def top_field(self) -> str:
        return self.field.split(".", 1)[0].split("[", 1)[0]

    @property
    def id(self) -> str:
        """Stable across reruns: what known-divergence entries name (``WORKLOAD:FIELD``)."""
        return f"{self.workload}:{self.top_field}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "workload": self.workload, "level": self.level, "step": self.step,
            "field": self.field, "left": self.left, "right": self.right,
            "requests": list(self.requests), "left_record": self.left_record,
            "right_record": self.right_record,
            "preceding": [{"left": a, "right": b} for a, b in self.preceding],
        }

    def summary(self) -> str:
        hint = (" (each system derives NONE_HASH from PYTHONHASHSEED; unset, xxhash draws a "
                "random seed per process: set PYTHONHASHSEED to compare hashes)"
                if self.field == "none_hash" else "")
        return (f"{self.workload}: first divergence at level {self.level}, step {self.step}, "
                f"field {self.field}: {_short(self.left)} != {_short(self.right)}{hint}")


class Comparer:
    def __init__(self, workload: str, level: str, context: int = 3) -> None:
        self.workload = workload
        self.level = check_level(level)
        self._history: deque[tuple[dict[str, Any], dict[str, Any]]] = deque(maxlen=context)
        self._forward: dict[int, int] = {}
        self._backward: dict[int, int] = {}
        self.divergence: Divergence | None = None
        self.steps = 0

    def feed(self, left: StepRecord | None, right: StepRecord | None,
             left_json: dict[str, Any] | None = None,
             right_json: dict[str, Any] | None = None) -> Divergence | None:
        """Compare one step (None: that side has ended). Returns the divergence, once.

        `left_json` / `right_json` are the records' `to_json()`, when the caller has them
        already (one lockstep run feeds the same pair to a comparer per level)."""
        if self.divergence is not None:
            return None
        a = left_json if left_json is not None or left is None else left.to_json()
        b = right_json if right_json is not None or right is None else right.to_json()
        if a is None or b is None:
            present = a if a is not None else b
            if present is None:
                return None
            return self._diverge(present["step"], "ended", a is None, b is None, a, b,
                                 left, right, ())
        # Fields written only when present (a connector's, an encoder's) may be on one side.
        fields = SCHEDULE_FIELDS if self.level == "schedule" else (
            tuple(a) if a.keys() == b.keys() else (*a, *(k for k in b if k not in a)))
        for name in fields:
            renamed = self.level == "renamed" and name in BLOCK_ID_FIELDS
            x, y = a.get(name, ABSENT), b.get(name, ABSENT)
            if not renamed and x == y:
                continue  # the common case, decided in C
            if name in FREE_QUEUE_FIELDS and (self.level != "exact" or x is None or y is None):
                continue
            if x is ABSENT or y is ABSENT:
                return self._diverge(a["step"], name, x, y, a, b, left, right, ())
            found = self._diff(x, y, (name,), renamed)
            if found is not None:
                parts, x, y = found
                involved = _involved(parts, a[name], b[name])
                return self._diverge(a["step"], _render(parts), x, y, a, b, left, right,
                                     involved)
        self._history.append((a, b))
        self.steps += 1
        return None

    def feed_setting(self, field: str, left: Any, right: Any) -> Divergence | None:
        """Compare a per-run setting both systems derive themselves (NONE_HASH) before step 0.
        It shapes hashes only, so the `schedule` level does not look at it."""
        if self.divergence is not None or self.level == "schedule" or left == right:
            return None
        return self._diverge(0, field, left, right, None, None, None, None, ())

    def _diverge(self, step: int, path: str, x: Any, y: Any, a: dict[str, Any] | None,
                 b: dict[str, Any] | None, left: StepRecord | None, right: StepRecord | None,
                 involved: tuple[str, ...]) -> Divergence:
        if not involved:
            ids: set[str] = set()
            for record in (left, right):
                if record is not None:
                    ids |= record.request_ids()
            involved = tuple(sorted(ids))
        self.divergence = Divergence(self.workload, self.level, step, path, x, y, a, b,
                                     tuple(self._history), involved)
        return self.divergence

    def _diff(self, x: Any, y: Any, parts: tuple[str | int, ...],
              renamed: bool) -> tuple[tuple[str | int, ...], Any, Any] | None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in [*x, *(k for k in y if k not in x)]:
                sub = (*parts, key)
                if key not in x or key not in y:
                    return sub, x.get(key, ABSENT), y.get(key, ABSENT)
                found = self._diff(x[key], y[key], sub, renamed)
                if found is not None:
                    return found
            return None
        if isinstance(x, list) and isinstance(y, list):
            for i in range(max(len(x), len(y))):
                sub = (*parts, i)
                if i >= len(x) or i >= len(y):
                    return (sub, x[i] if i < len(x) else ABSENT,
                            y[i] if i < len(y) else ABSENT)
                found = self._diff(x[i], y[i], sub, renamed)
                if found is not None:
                    return found
            return None
        if renamed and type(x) is int and type(y) is int:
            return None if self._bind(x, y) else (parts, x, y)
        return None if x == y and type(x) is type(y) else (parts, x, y)

    def _bind(self, x: int, y: int) -> bool:
        mapped = self._forward.get(x)
        if mapped is not None:
            return mapped == y
        if y in self._backward:
            return False
        self._forward[x] = y
        self._backward[y] = x
        return True


def _render(parts: tuple[str | int, ...]) -> str:
    out = str(parts[0])
    for part in parts[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _involved(parts: tuple[str | int, ...], x: Any, y: Any) -> tuple[str, ...]:
    """Requests a divergence is about: the one its path names, else the ones that differ."""
    if parts[0] in REQUEST_KEYED_FIELDS and len(parts) > 1 and isinstance(parts[1], str):
        return (parts[1],)
    if isinstance(x, list) and isinstance(y, list):
        strings = {v for v in (*x, *y) if isinstance(v, str)}
        return tuple(sorted(s for s in strings if (s in x) != (s in y)))
    return ()


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""The CPU tier's slots and the state of the chunk held in each.

A slot is handed out fresh (never used, in increasing order) while any remain, and after that
from the slots given back, the most recently given back first. A chunk's `ref_cnt` is the
number of loads reading it; `WRITING` (-1) means its store has not completed, so it can be
neither read nor evicted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WRITING = -1


@dataclass(slots=True)
class Chunk:
    """One offloaded chunk: its CPU slot and how many readers hold it (`WRITING` while
    written)."""

    chunk_id: int
    ref_cnt: int = WRITING

    @property
    def is_ready(self) -> bool:
        return self.ref_cnt >= 0


@dataclass(slots=True)
class SlotPool:
    """`capacity` CPU slots: `handed_out` counts the fresh ones ever given, `given_back` holds
    the slots returned since (reused last-in, first-out)."""

    capacity: int
    handed_out: int = 0
    given_back: list[int] = field(default_factory=list)

    def num_free(self) -> int:
        return self.capacity - self.handed_out + len(self.given_back)

    def take(self, count: int) -> list[int]:
        """`count` slots: fresh ones first, then returned ones. The caller made room."""
        fresh = min(count, self.capacity - self.handed_out)
        taken = list(range(self.handed_out, self.handed_out + fresh))
        self.handed_out += fresh
        for _ in range(count - fresh):
            taken.append(self.given_back.pop())
        return taken

    def give_back(self, chunk_id: int) -> None:
        self.given_back.append(chunk_id)

    def clear(self) -> None:
        self.handed_out = 0
        self.given_back.clear()

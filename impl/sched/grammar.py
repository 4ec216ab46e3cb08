"""Structured output as the scheduler sees it: a request's grammar, compiled in the background.

Until its grammar is compiled a request waits (`WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`): it
keeps its place in the queue, admission passes over it (it counts as skipped from the moment it
arrives) and promotes it to WAITING the first time admission reaches it with the grammar ready.
A grammar that failed to compile is noticed the same way, and the request is finished with an
error when the step's output is applied. Once running, the scheduler tells the sampler which
scheduled requests need the grammar's bitmask (decodes, not prefill chunks) and trims each
request's drafts at the first token the grammar rejects, before they are scheduled.

The scheduler never looks inside a grammar: `Grammar` is what it needs of one (a state and a
token test), and the engine that compiles grammars sets the state.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence


class GrammarState(enum.IntEnum):
    COMPILING = enum.auto()
    READY = enum.auto()
    FAILED = enum.auto()  # compiling raised: the request ends with an error


class Grammar:
    """A compiled (or compiling) grammar that accepts the tokens in ``[lo, hi)`` and the
    request's ending tokens (EOS and stop tokens end the grammar)."""

    __slots__ = ("ends", "hi", "lo", "state")

    def __init__(self, lo: int, hi: int, ends: Iterable[int] = (),
                 state: GrammarState = GrammarState.COMPILING) -> None:
        self.lo = lo
        self.hi = hi
        self.ends = frozenset(ends)
        self.state = state

    def accepts(self, token: int) -> bool:
        return self.lo <= token < self.hi or token in self.ends

    def valid_prefix(self, tokens: Sequence[int]) -> list[int]:
        """The drafts up to (not including) the first one the grammar rejects; padding (-1)
        ends them too."""
        valid: list[int] = []
        for token in tokens:
            if token < 0 or not self.accepts(token):
                break
            valid.append(token)
        return valid

    def __repr__(self) -> str:
        return f"Grammar([{self.lo}, {self.hi}), {self.state.name})"

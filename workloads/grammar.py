"""Structured output: a request whose tokens a grammar constrains.

The engine compiles a request's grammar in the background; until it is compiled the request
waits (`WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR`) and the scheduler passes over it, and a grammar
that fails to compile finishes the request with an error once the scheduler reaches it. Once
running, the grammar bounds what the sampler may pick (a bitmask per scheduled decode) and
which drafts survive: a draft stops at its first token the grammar rejects.

A workload names the grammar by what the scheduler can observe of it: `compile_steps`, how many
engine steps compiling takes after the request arrives (0: ready before its first schedule);
`fails`, whether compiling fails; and `allowed`, the half-open token range ``[lo, hi)`` the
grammar accepts (the request's EOS and stop tokens are always accepted: they end the
grammar). The token model samples inside that range, as a masked sampler would; the drafter
does not know the grammar, so its wrong guesses are what the grammar trims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workloads.errors import WorkloadError


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """A request's grammar: compiled `compile_steps` steps after arrival (or failing then), and
    accepting the tokens in ``[allowed_lo, allowed_hi)``."""

    allowed_lo: int
    allowed_hi: int
    compile_steps: int = 0
    fails: bool = False

    def accepts(self, token: int, always: frozenset[int]) -> bool:
        """Whether the grammar accepts `token`; `always` holds the request's EOS and stop
        tokens."""
        return self.allowed_lo <= token < self.allowed_hi or token in always

    def to_dict(self) -> dict[str, Any]:
        return {"allowed": [self.allowed_lo, self.allowed_hi],
                **({"compile_steps": self.compile_steps} if self.compile_steps else {}),
                **({"fails": True} if self.fails else {})}


def check_grammar(grammar: GrammarSpec, vocab_size: int, forbidden: frozenset[int],
                  fail: Callable[[str, str], WorkloadError]) -> None:
    """`fail(field, problem)` for a grammar that cannot be meant: an empty or out-of-vocabulary
    range, or one that leaves the sampler nothing but the request's EOS and stop tokens
    (`forbidden`: a grammar the model could only end)."""
    lo, hi = grammar.allowed_lo, grammar.allowed_hi
    if not 0 <= lo < hi <= vocab_size:
        raise fail("grammar.allowed", f"[{lo}, {hi}) is not a non-empty range inside the "
                   f"vocabulary [0, {vocab_size})")
    if all(token in forbidden for token in range(lo, hi)):
        raise fail("grammar.allowed", f"[{lo}, {hi}) holds only the request's EOS and stop "
                   "tokens: the sampler has nothing else to pick")

"""`SpecDecodingStats`: how speculative decoding went in one applied step, for metrics.

Every request whose drafts were verified counts once: its drafts (padding drafts included:
the verifier ran over them) and how many were accepted, also per draft position, so a
dashboard can show the acceptance rate by position.
"""

from __future__ import annotations


class SpecDecodingStats:
    __slots__ = ("num_drafts", "num_draft_tokens", "num_accepted_tokens",
                 "num_accepted_tokens_per_pos", "num_draft_tokens_per_pos")

    def __init__(self, num_spec_tokens: int) -> None:
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.num_accepted_tokens_per_pos = [0] * num_spec_tokens
        self.num_draft_tokens_per_pos = [0] * num_spec_tokens

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        for position in range(num_accepted):
            self.num_accepted_tokens_per_pos[position] += 1
        for position in range(num_draft_tokens):
            self.num_draft_tokens_per_pos[position] += 1

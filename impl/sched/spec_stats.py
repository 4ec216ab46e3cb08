"""`SpecDecodingStats`: how speculative decoding went in one applied step, for metrics.

Every request whose drafts were verified counts once: its drafts (padding drafts included:
the verifier ran over them) and how many were accepted, also per draft position, so a
dashboard can show the acceptance rate by position.

`RequestSpecMetrics`: the same per request, over its whole life (upstream's
per_request_spec_decode_metrics, reported in the response): a histogram of accepted drafts
per verify step, the drafts proposed (those a grammar rejected left out), and with `detailed`
each step's accepted and proposed counts in order.
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


class RequestSpecMetrics:
    __slots__ = ("histogram", "num_draft_tokens", "per_step_accepted", "per_step_drafted",
                 "detailed")

    def __init__(self, num_spec_tokens: int, detailed: bool) -> None:
        self.histogram = [0] * (num_spec_tokens + 1)  # indexed by accepted drafts
        self.num_draft_tokens = 0
        self.per_step_accepted: list[int] = []
        self.per_step_drafted: list[int] = []
        self.detailed = detailed

    def observe(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.histogram[num_accepted] += 1
        self.num_draft_tokens += num_draft_tokens
        if self.detailed:
            self.per_step_accepted.append(num_accepted)
            self.per_step_drafted.append(num_draft_tokens)

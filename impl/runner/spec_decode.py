"""Speculative-decoding verification: keep the drafts the target model agrees with.

The target model scored the request's last real token and its k drafts in one pass, giving k + 1
distributions. Greedy: accept drafts while each equals the target's argmax, then emit the
target's token at the first disagreement (or after the last draft: the bonus token); the output
is exactly what greedy decoding without drafts produces. Random: the drafts come from a
deterministic proposer (a point mass), so draft d is accepted with probability p(d) and on
rejection the token is drawn from p with d removed; that keeps the output distributed as p.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from impl.runner.sampler import draw, probabilities
from impl.runner.sampling_params import SamplingParams


def verify_greedy(target_tokens: Sequence[int], draft_token_ids: Sequence[int]) -> list[int]:
    """`target_tokens` has len(drafts) + 1 entries: the argmax after each input position."""
    accepted: list[int] = []
    for target, draft in zip(target_tokens, draft_token_ids, strict=False):
        accepted.append(target)
        if target != draft:
            return accepted
    accepted.append(target_tokens[len(draft_token_ids)])
    return accepted


def verify_random(logits: torch.Tensor, draft_token_ids: Sequence[int], params: SamplingParams,
                  generator: torch.Generator | None) -> list[int]:
    # logits: [num_drafts + 1, vocab_size]
    probs = probabilities(logits, [params] * logits.shape[0])  # [num_drafts + 1, vocab_size]
    accepted: list[int] = []
    for position, draft in enumerate(draft_token_ids):
        u = float(torch.rand((), generator=generator, device=probs.device))
        if u < float(probs[position, draft]):
            accepted.append(draft)
            continue
        residual = probs[position].clone()
        residual[draft] = 0.0
        if float(residual.sum()) <= 0.0:  # p was a point mass on the draft: cannot reject
            accepted.append(draft)
            continue
        accepted.append(draw(residual / residual.sum(), generator))
        return accepted
    accepted.append(draw(probs[len(draft_token_ids)], generator))
    return accepted


def verify(logits: torch.Tensor, draft_token_ids: Sequence[int], params: SamplingParams,
           generator: torch.Generator | None) -> list[int]:
    """Accepted drafts plus one token (correction or bonus)."""
    # logits: [num_drafts + 1, vocab_size]
    if params.greedy:
        return verify_greedy(logits.argmax(dim=-1).tolist(), draft_token_ids)
    return verify_random(logits, draft_token_ids, params, generator)

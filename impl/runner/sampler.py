"""Sampling: logits -> one token per row, greedy or random (temperature, top-k, top-p).

Random rows draw with the exponential race (argmax of p / E with E ~ Exp(1)), which samples
exactly from p and needs one draw per vocabulary entry from the row's own generator: a seeded
request gets the same tokens whatever else shares its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from impl.runner.sampling_params import SamplingParams


def ban_tokens(logits: torch.Tensor, banned: Sequence[Sequence[int]]) -> torch.Tensor:
    """Set the banned tokens of each row to -inf (EOS and stop tokens before min_tokens)."""
    # logits: [num_rows, vocab_size]
    if not any(banned):
        return logits
    logits = logits.clone()
    for row, tokens in enumerate(banned):
        if tokens:
            logits[row, list(tokens)] = float("-inf")
    return logits


def filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor,
                       top_p: torch.Tensor) -> torch.Tensor:
    """Mask (to -inf) what falls outside each row's top-k and nucleus; at least one survives."""
    # logits: [num_rows, vocab_size]; top_k: [num_rows] int (0: off); top_p: [num_rows] float
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    ranks = torch.arange(logits.shape[-1], device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k, logits.shape[-1])[:, None]
    sorted_logits = sorted_logits.masked_fill(ranks >= k, float("-inf"))
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the strictly better tokens
    sorted_logits = sorted_logits.masked_fill((mass_before >= top_p[:, None]) & (ranks > 0),
                                              float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


def probabilities(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Each row's sampling distribution after temperature, top-k and top-p (fp32)."""
    # logits: [num_rows, vocab_size] -> probs: [num_rows, vocab_size]
    device = logits.device
    temperature = torch.tensor([max(p.temperature, 1e-5) for p in params], device=device)
    scaled = logits.float() / temperature[:, None]
    if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
        top_k = torch.tensor([p.top_k for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], device=device)
        scaled = filter_top_k_top_p(scaled, top_k, top_p)
    return scaled.softmax(dim=-1)


def draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """One token from one distribution, with the exponential race."""
    # probs: [vocab_size]
    race = torch.empty_like(probs).exponential_(generator=generator)
    return int((probs / race).argmax())


def sample(logits: torch.Tensor, params: Sequence[SamplingParams],
           generators: Sequence[torch.Generator | None],
           banned: Sequence[Sequence[int]] = (),
           argmax: Callable[[torch.Tensor], torch.Tensor] | None = None) -> list[int]:
    """One token per row; greedy rows take the argmax of the raw logits (`argmax`: the
    backend's, e.g. the native kernel's; torch's by default)."""
    # logits: [num_rows, vocab_size]
    if banned:
        logits = ban_tokens(logits, banned)
    tokens = (logits.argmax(dim=-1) if argmax is None else argmax(logits)).tolist()
    random_rows = [row for row, p in enumerate(params) if not p.greedy]
    if random_rows:
        probs = probabilities(logits[random_rows], [params[r] for r in random_rows])
        for index, row in enumerate(random_rows):
            tokens[row] = draw(probs[index], generators[row])
    return [int(t) for t in tokens]

"""`RequestState`: what the runner remembers about a request between steps.

It outlives the request's row in the input batch: a preempted or unscheduled request leaves the
batch but keeps its tokens, sampling parameters and random generator, so it resumes exactly
where it was (a seeded request's random stream is not restarted by a preemption).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from impl.runner.sampling_params import SamplingParams


@dataclass(slots=True)
class RequestState:
    req_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    block_ids: tuple[list[int], ...]  # per KV-cache group
    num_computed_tokens: int
    params: SamplingParams
    generator: torch.Generator | None  # None: the runner's shared generator (unseeded)
    eos_token_id: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def banned_token_ids(self) -> tuple[int, ...]:
        """Tokens the sampler must not produce yet: EOS and stop tokens before `min_tokens`."""
        if len(self.output_token_ids) >= self.params.min_tokens:
            return ()
        eos = () if self.eos_token_id is None else (self.eos_token_id,)
        return eos + self.params.stop_token_ids


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator

"""`SamplingParams`: how one request turns logits into tokens, and when it stops."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """temperature 0 is greedy; top_k 0 and top_p 1.0 disable those filters. A `seed` gives the
    request its own generator, so its tokens do not depend on what else is in the batch."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens: must be >= 1 (got {self.max_tokens})")
        if self.temperature < 0:
            raise ValueError(f"temperature: must be >= 0 (got {self.temperature})")
        if self.top_k < 0:
            raise ValueError(f"top_k: must be >= 0, 0 disables it (got {self.top_k})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: must be in (0, 1] (got {self.top_p})")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens: must be in [0, max_tokens] (got {self.min_tokens})")

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

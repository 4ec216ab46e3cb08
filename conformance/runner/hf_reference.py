"""Hugging Face transformers as the model reference: full-sequence logits and greedy decoding.

Greedy decoding is plain incremental decoding with Hugging Face's dense KV cache: it shares
nothing with paged attention, chunked prefill or the scheduler, which is the point.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class HFReference:
    def __init__(self, model_dir: str | Path) -> None:
        transformers: Any = importlib.import_module("transformers")  # optional and untyped
        # The checkpoint's own class (Llama, or Llama 4's text model with its chunked layers).
        self.model: Any = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir)).eval()

    def logits(self, token_ids: Sequence[int]) -> Any:
        """[len(token_ids), vocab_size] fp32: the logits after every position."""
        import torch

        with torch.no_grad():
            return self.model(torch.tensor([list(token_ids)])).logits[0].float()

    def greedy(self, prompt: Sequence[int], max_tokens: int,
               eos_token_id: int | None = None) -> list[int]:
        """Argmax decoding with Hugging Face's own KV cache; stops after `eos_token_id`
        (included) when one is given."""
        import torch

        out: list[int] = []
        with torch.no_grad():
            step = self.model(torch.tensor([list(prompt)]), use_cache=True)
            for _ in range(max_tokens):
                token = int(step.logits[0, -1].argmax())
                out.append(token)
                if token == eos_token_id or len(out) == max_tokens:
                    break
                step = self.model(torch.tensor([[token]]), past_key_values=step.past_key_values,
                                  use_cache=True)
        return out

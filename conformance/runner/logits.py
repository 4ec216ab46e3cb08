"""Logits of the paged model for a whole token sequence, computed chunk by chunk.

Each chunk reads the earlier chunks back from the paged cache through a deliberately reversed
block table, so agreement with a dense reference (Hugging Face) covers RoPE positions, slot
mapping, cache writes and paged reads, not just the dense math.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def paged_logits(model: Any, tokens: Sequence[int], chunk: int, block_size: int = 16) -> Any:
    """[len(tokens), vocab_size] fp32 from an `impl.runner.model.LlamaForCausalLM`."""
    import torch

    from impl.runner.input_batch import InputBatch
    from impl.runner.kv_cache import allocate_kv_caches, model_kv_cache_config
    from impl.runner.request_state import RequestState
    from impl.runner.sampling_params import SamplingParams
    from impl.runner.step_inputs import build_step_inputs

    device = torch.device("cpu")
    config = model.config
    num_blocks = -(-len(tokens) // block_size)
    caches = allocate_kv_caches(model_kv_cache_config(config, num_blocks + 4, block_size),
                                device)
    layers = [caches.layers[config.layer_name(i)] for i in range(config.num_hidden_layers)]
    blocks = list(range(num_blocks + 3, 3, -1))  # reversed, never the null block
    batch = InputBatch(1, len(tokens), [block_size])
    batch.add_request(RequestState("r", list(tokens), [], (blocks,), 0, SamplingParams(), None))
    logits = []
    for start in range(0, len(tokens), chunk):
        count = min(chunk, len(tokens) - start)
        batch.num_computed_tokens[0] = start
        inputs = build_step_inputs(batch, [count], [0], [0], device)
        hidden = model(inputs.input_ids, inputs.positions, layers,
                       [inputs.metadata[0]] * len(layers))
        logits.append(model.compute_logits(hidden))
    return torch.cat(logits)

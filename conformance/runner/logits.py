"""Logits of the paged model for a whole token sequence, computed chunk by chunk.

Each chunk reads the earlier chunks back from the paged cache through a deliberately reversed
block table, so agreement with a dense reference (Hugging Face) covers RoPE positions, slot
mapping, cache writes and paged reads, not just the dense math.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def paged_logits(model: Any, tokens: Sequence[int], chunk: int, block_size: int = 16) -> Any:
    """[len(tokens), vocab_size] fp32 from an `impl.runner.model.LlamaForCausalLM`, each layer
    reading its KV-cache group (one group for Llama; Llama 4 has chunked and full ones)."""
    import torch

    from impl.runner.input_batch import InputBatch
    from impl.runner.kv_cache import allocate_kv_caches, model_kv_cache_config
    from impl.runner.model_runner import local_attention
    from impl.runner.request_state import RequestState
    from impl.runner.sampling_params import SamplingParams
    from impl.runner.step_inputs import build_step_inputs

    device = torch.device("cpu")
    config = model.config
    num_blocks = -(-len(tokens) // block_size)
    probe = model_kv_cache_config(config, 1, block_size)
    num_groups = len(probe.kv_cache_groups)
    kv_config = model_kv_cache_config(config, num_groups * num_blocks + 4, block_size)
    caches = allocate_kv_caches(kv_config, device)
    names = [config.layer_name(i) for i in range(config.num_hidden_layers)]
    layers = [caches.layers[name] for name in names]
    # Each group its own blocks (the pool never hands one block to two groups), reversed.
    top = num_groups * num_blocks + 3
    blocks = tuple(list(range(top - g * num_blocks, top - (g + 1) * num_blocks, -1))
                   for g in range(num_groups))
    batch = InputBatch(1, len(tokens), [block_size] * num_groups)
    batch.add_request(RequestState("r", list(tokens), [], blocks, 0, SamplingParams(), None))
    windows, chunks = local_attention(kv_config)
    logits = []
    for start in range(0, len(tokens), chunk):
        count = min(chunk, len(tokens) - start)
        batch.num_computed_tokens[0] = start
        inputs = build_step_inputs(batch, [count], [0], windows, device, chunks)
        hidden = model(inputs.input_ids, inputs.positions, layers,
                       [inputs.metadata[caches.layer_group[name]] for name in names])
        logits.append(model.compute_logits(hidden))
    return torch.cat(logits)

"""Tiny Llama and Llama 4 (text) checkpoints built locally with transformers (no model hub).

Weights are drawn with a raised init std (0.08 instead of 0.02): logits then spread widely, the
top two are well apart, and greedy choices do not flip on the rounding noise that separates
three independent implementations. Head size 32: upstream's CPU attention has no kernel for 16.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

TINY_LLAMA: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def build_tiny_llama(directory: str | Path, *, seed: int = 0, init_std: float = 0.08,
                     **overrides: Any) -> Path:
    """Write config.json + model.safetensors (fp32) to `directory`; returns it."""
    import torch

    transformers: Any = importlib.import_module("transformers")  # optional and untyped here
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = transformers.LlamaConfig(**{**TINY_LLAMA, **overrides}, initializer_range=init_std,
                         dtype="float32")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
        _vary_norm_weights(model, torch)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


def _vary_norm_weights(model: Any, torch: Any) -> None:
    """RMSNorm weights around 1 instead of transformers' all-ones init: with all ones, a
    runner that dropped the weight multiplication would still match Hugging Face."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1.0 + 0.2 * torch.randn_like(parameter))


TINY_LLAMA4: dict[str, Any] = {
    **TINY_LLAMA,
    "num_hidden_layers": 8,
    "intermediate_size_mlp": 256,
    "head_dim": 32,
    "attention_chunk_size": 16,  # a chunk per block of 16: prompts cross several chunks
    "moe_layers": [],  # dense: the twin refuses MoE layers
    "use_qk_norm": True,
    "attn_temperature_tuning": True,
    "floor_scale": 16,  # temperature tuning already changes queries at position 15
    "pad_token_id": 0,
}


def build_tiny_llama4(directory: str | Path, *, seed: int = 0, init_std: float = 0.08,
                      **overrides: Any) -> Path:
    """A dense Llama 4 text model: layers 0-2 and 4-6 chunked local attention with RoPE,
    layers 3 and 7 full attention without RoPE (Llama 4's default every 4th). fp32."""
    import torch

    transformers: Any = importlib.import_module("transformers")
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = transformers.Llama4TextConfig(**{**TINY_LLAMA4, **overrides},
                                           initializer_range=init_std, dtype="float32")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = transformers.Llama4ForCausalLM(config)
        _vary_norm_weights(model, torch)
    model.save_pretrained(str(path), safe_serialization=True)
    return path

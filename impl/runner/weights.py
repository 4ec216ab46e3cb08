"""Checkpoint loading: every `*.safetensors` file of a directory, checked against the config.

Checking names and shapes before building the model turns a mismatched checkpoint into one line
naming the tensor (instead of a broadcasting error deep inside a forward pass).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from impl.runner.config import ModelConfig


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Hugging Face Llama (and Llama 4 text) tensor names and shapes (Linear weights are
    [out, in])."""
    h, i, d = config.hidden_size, config.intermediate_size, config.head_dim
    mlp = config.mlp_prefix
    q_out, kv_out = config.num_attention_heads * d, config.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (config.vocab_size, h),
        "model.norm.weight": (h,),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for n in range(config.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes.update({
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q_out, h),
            p + "self_attn.k_proj.weight": (kv_out, h),
            p + "self_attn.v_proj.weight": (kv_out, h),
            p + "self_attn.o_proj.weight": (h, q_out),
            p + f"{mlp}.gate_proj.weight": (i, h),
            p + f"{mlp}.up_proj.weight": (i, h),
            p + f"{mlp}.down_proj.weight": (h, i),
        })
        if config.attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q_out,),
                           p + "self_attn.k_proj.bias": (kv_out,),
                           p + "self_attn.v_proj.bias": (kv_out,),
                           p + "self_attn.o_proj.bias": (h,)})
        if config.mlp_bias:
            shapes.update({p + f"{mlp}.gate_proj.bias": (i,), p + f"{mlp}.up_proj.bias": (i,),
                           p + f"{mlp}.down_proj.bias": (h,)})
    return shapes


def read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{model_dir}: no *.safetensors weight file")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{file}: unreadable safetensors file ({err})") from None
    return tensors


def check_weights(tensors: dict[str, torch.Tensor], config: ModelConfig,
                  where: Path) -> dict[str, torch.Tensor]:
    """The tensors the model uses, in the config's dtype; unknown extras (rotary caches,
    a tied lm_head copy) are ignored."""
    dtype = getattr(torch, config.dtype)
    checked: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(config).items():
        tensor = tensors.get(name)
        if tensor is None:
            raise ValueError(f"{where}: missing tensor {name}")
        if tuple(tensor.shape) != shape:
            raise ValueError(f"{where}: tensor {name} has shape {list(tensor.shape)}, "
                             f"config.json implies {list(shape)}")
        checked[name] = tensor.to(dtype)
    return checked


def load_weights(model_dir: str | Path, config: ModelConfig) -> dict[str, torch.Tensor]:
    path = Path(model_dir)
    return check_weights(read_safetensors(path), config, path)


def fuse_projections(weights: dict[str, torch.Tensor],
                     config: ModelConfig) -> dict[str, torch.Tensor]:
    """q/k/v into `self_attn.qkv_proj` and gate/up into `mlp.gate_up_proj`, per layer, rows
    concatenated in that order (checked tensors, MLP prefix already renamed to `mlp`)."""
    fused = dict(weights)
    parts = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
    for n in range(config.num_hidden_layers):
        for target, sources in parts.items():
            for kind in ("weight", "bias"):
                names = [f"model.layers.{n}.{source}.{kind}" for source in sources]
                if names[0] in fused:
                    fused[f"model.layers.{n}.{target}.{kind}"] = torch.cat(
                        [fused.pop(name) for name in names])
    return fused

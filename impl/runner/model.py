"""A Llama-family causal LM over a paged KV cache: embeddings, decoder layers (RMSNorm,
grouped-query attention with RoPE, SwiGLU MLP), final norm and LM head. Llama 4's dense text
model is the same stack with per-layer attention options (see `Attention`).

The batch is one flat list of tokens (no padding, no batch dimension): every layer sees
[num_tokens, hidden] and each attention layer writes its keys and values to its own cache and
reads the history of each request through the block table in its `AttentionMetadata`.
Module names mirror Hugging Face's, except that q/k/v and gate/up are each one fused
projection (`qkv_proj`, `gate_up_proj`: one matmul instead of three, or two, per layer); loading
concatenates the checkpoint's tensors into them (`weights.fuse_projections`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from impl.runner.attention_backend import PACKED_LINEARS, AttentionBackend, get_backend
from impl.runner.attention_metadata import AttentionMetadata
from impl.runner.config import ModelConfig, load_model_config
from impl.runner.cpu_linear import pack_linears
from impl.runner.layers import RMSNorm, RopeAngles, RotaryEmbedding, SwiGLU, l2_norm
from impl.runner.weights import fuse_projections, load_weights


class Attention(nn.Module):
    """Grouped-query attention of decoder layer `index`. Llama 4 layers may skip RoPE (then
    optionally scale queries up at long positions), or L2-normalise q and k after it."""

    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        d, bias = config.head_dim, config.attention_bias
        self.use_rope = config.uses_rope(index)
        self.qk_norm_eps = config.rms_norm_eps if config.use_qk_norm and self.use_rope else 0.0
        self.temperature = (config.floor_scale, config.attn_scale) if (
            config.attn_temperature_tuning and not self.use_rope) else None
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_attention_heads, config.num_key_value_heads, d)
        self.scale = d ** -0.5
        self.qkv_proj = nn.Linear(config.hidden_size, (self.num_heads + 2 * self.num_kv_heads) * d,
                                  bias=bias)
        self.o_proj = nn.Linear(self.num_heads * d, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, rope: RopeAngles,
                kv_cache: torch.Tensor, meta: AttentionMetadata,
                attention: AttentionBackend) -> torch.Tensor:
        # x: [num_tokens, hidden]; kv_cache: [num_blocks, 2, block_size, kv_heads, head_dim]
        n, heads, kv_heads, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        qk, v = self.qkv_proj(x).split([(heads + kv_heads) * d, kv_heads * d], dim=-1)
        qk = qk.view(n, heads + kv_heads, d)  # q's heads, then k's: rotated and normed as one
        if self.use_rope:
            qk = rope.rotate(qk)
        if self.qk_norm_eps:
            qk = l2_norm(qk, self.qk_norm_eps)
        q, k = qk[:, :heads], qk[:, heads:]  # [n, heads, d], [n, kv_heads, d]
        if self.temperature is not None:
            floor_scale, attn_scale = self.temperature
            scales = torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale))
            q = (q * (scales * attn_scale + 1.0)[:, None, None]).to(q.dtype)
        attention.write(k, v.view(n, kv_heads, d), kv_cache, meta.slot_mapping)
        out = attention.attend(q, kv_cache, meta, self.scale)  # [n, heads, head_dim]
        projected: torch.Tensor = self.o_proj(out.reshape(n, heads * d))
        return projected


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size, config.mlp_bias)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, rope: RopeAngles,
                kv_cache: torch.Tensor, meta: AttentionMetadata,
                attention: AttentionBackend) -> torch.Tensor:
        # h: [num_tokens, hidden] (the residual stream) -> same
        h = h + self.self_attn(self.input_layernorm(h), positions, rope, kv_cache, meta,
                               attention)
        out: torch.Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i)
                                    for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings,
                                      config.rope, config.rope_interleaved)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, attention_backend: str = "torch") -> None:
        super().__init__()
        self.config = config
        self.attention: AttentionBackend = get_backend(attention_backend)
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: Sequence[torch.Tensor],
                metadata: Sequence[AttentionMetadata]) -> torch.Tensor:
        """Hidden states after the final norm. `kv_caches[i]` / `metadata[i]` serve layer i."""
        # input_ids, positions: [num_tokens] -> [num_tokens, hidden]
        h = self.model.embed_tokens(input_ids)
        rope = self.model.rotary.angles(positions, h.dtype)
        for layer, cache, meta in zip(self.model.layers, kv_caches, metadata, strict=True):
            h = layer(h, positions, rope, cache, meta, self.attention)
        out: torch.Tensor = self.model.norm(h)
        return out

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [num_rows, hidden] -> [num_rows, vocab_size] (fp32)
        logits: torch.Tensor = self.lm_head(hidden)
        return logits.float()

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: torch.device,
                        attention_backend: str = "torch") -> LlamaForCausalLM:
        """Config and weights are checked before any module is built (one-line errors).
        The "cpu" and "native" backends also pack the linear layers' weights for oneDNN
        (`cpu_linear`)."""
        config = load_model_config(model_dir)
        weights = load_weights(model_dir, config)
        prefix = f".{config.mlp_prefix}."
        weights = fuse_projections({name.replace(prefix, ".mlp."): w
                                    for name, w in weights.items()}, config)
        if config.tie_word_embeddings:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        model = cls(config, attention_backend).to(getattr(torch, config.dtype))
        model.load_state_dict(weights, strict=True, assign=True)
        model = model.to(device).eval()
        if attention_backend in PACKED_LINEARS:
            pack_linears(model)
        return model

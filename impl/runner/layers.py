"""The Llama building blocks other than attention: RMSNorm, rotary embedding, SwiGLU MLP.

The arithmetic follows the published Llama recipe in the order Hugging Face evaluates it (norm in
fp32, then cast; RoPE angles in fp32; rotate-half pairing), because greedy tokens are compared
with Hugging Face's and the closer the arithmetic, the smaller the logit differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from impl.runner.config import RopeConfig


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size), requires_grad=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, hidden_size]
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # The same arithmetic in one call (the casts below are no-ops in fp32).
            return nn.functional.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inv_freq(head_dim: int, rope: RopeConfig) -> torch.Tensor:
    """Inverse frequencies, [head_dim // 2], with the checkpoint's scaling applied."""
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float) / head_dim))
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        return _llama3_scale(inv_freq, rope)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    """Long wavelengths are slowed by `factor`, short ones kept, the band between blended."""
    old_len = rope.original_max_position_embeddings
    low_wavelen = old_len / rope.low_freq_factor
    high_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = ((old_len / wavelen - rope.low_freq_factor)
              / (rope.high_freq_factor - rope.low_freq_factor))
    blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    """RoPE tables indexed by absolute position (`angles` picks a step's rows, `RopeAngles`
    rotates). Llama rotates the two halves of a head against each other; Llama 4
    (`interleaved`) rotates each adjacent pair (2i, 2i + 1) as one complex number, in fp32."""

    cos: torch.Tensor  # [max_positions, head_dim] (interleaved: [max_positions, head_dim // 2])
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_positions: int, rope: RopeConfig,
                 interleaved: bool = False) -> None:
        super().__init__()
        self.interleaved = interleaved
        inv_freq = rope_inv_freq(head_dim, rope)
        angles = torch.arange(max_positions, dtype=torch.float)[:, None] * inv_freq[None, :]
        table = angles if interleaved else torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", table.cos(), persistent=False)
        self.register_buffer("sin", table.sin(), persistent=False)

    def angles(self, positions: torch.Tensor, dtype: torch.dtype) -> RopeAngles:
        """The step's cos/sin rows, looked up once per forward pass for all layers."""
        # positions: [num_tokens]
        # Positions stay below max_position_embeddings: the engine caps max_model_len there
        # (checking here would synchronise the device every layer).
        cos, sin = self.cos[positions][:, None, :], self.sin[positions][:, None, :]
        if self.interleaved:
            return RopeAngles(cos, sin, True)
        return RopeAngles(cos.to(dtype), sin.to(dtype), False)


@dataclass(frozen=True, slots=True)
class RopeAngles:
    """cos/sin of each token's position: [num_tokens, 1, head_dim] in the model's dtype, or
    [num_tokens, 1, head_dim // 2] in fp32 when `interleaved`. Rotation is per head vector, so
    q and k can be rotated as one [num_tokens, heads + kv_heads, head_dim] tensor."""

    cos: torch.Tensor
    sin: torch.Tensor
    interleaved: bool

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, heads, head_dim] -> same
        if self.interleaved:
            return _rotate_pairs(x, self.cos, self.sin)
        return x * self.cos + _rotate_half(x) * self.sin


def _rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [num_tokens, heads, head_dim]; cos, sin: [num_tokens, 1, head_dim // 2] (fp32)
    x32 = x.float()
    even, odd = x32[..., 0::2], x32[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2).to(x.dtype)


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Scale each head vector to unit root-mean-square (Llama 4's qk norm: no weight)."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), with gate and up as one projection: rows [0, i) of
    `gate_up_proj` are the checkpoint's gate_proj, rows [i, 2i) its up_proj."""

    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [num_tokens, hidden_size] -> [num_tokens, hidden_size]
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # each [num_tokens, intermediate]
        out: torch.Tensor = self.down_proj(nn.functional.silu(gate) * up)
        return out

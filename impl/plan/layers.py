"""A model as the KV-cache planner sees it: an ordered list of layers and what each one keeps.

Attention layers keep K and V for some tokens (all of them, the last `sliding_window`, or the
current `attention_chunk_size` chunk; a decoder's cross-attention layer in an encoder-decoder
model keeps the encoder's output, as many tokens as the encoder takes in a step); mamba layers
keep one recurrent state per request, whose size comes from its state tensors and not from a
token count. Layer names follow upstream's
module names (`model.layers.{i}.self_attn.attn`, `model.layers.{i}.mixer`), because groups are
lists of names and the differential tests compare them name for name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

LayerKind = Literal["full", "sliding_window", "chunked_local", "mamba", "cross_attention"]
LAYER_KINDS: tuple[LayerKind, ...] = ("full", "sliding_window", "chunked_local", "mamba",
                                      "cross_attention")

# Bytes per element of every dtype a layer may store (KV-cache or state dtypes).
DTYPE_BYTES: MappingProxyType[str, int] = MappingProxyType({
    "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
})


def _require(condition: bool, field: str, problem: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {problem}")


def attention_layer_name(index: int) -> str:
    return f"model.layers.{index}.self_attn.attn"


def cross_attention_layer_name(index: int) -> str:
    return f"model.layers.{index}.encoder_attn.attn"


def mamba_layer_name(index: int) -> str:
    return f"model.layers.{index}.mixer"


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One layer. Attention kinds use `num_kv_heads`, `head_size`, `dtype` (and the window or
    chunk of their kind); mamba uses `state_shapes` with one dtype per state tensor."""

    name: str
    kind: LayerKind
    num_kv_heads: int = 0
    head_size: int = 0
    dtype: str = "bfloat16"
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    state_shapes: tuple[tuple[int, ...], ...] = ()
    state_dtypes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require(self.kind in LAYER_KINDS, "type", f"unknown layer type {self.kind!r}")
        _require(self.dtype in DTYPE_BYTES, "dtype", f"unknown dtype {self.dtype!r} "
                 f"(known: {', '.join(DTYPE_BYTES)})")
        wants_window = self.kind == "sliding_window"
        wants_chunk = self.kind == "chunked_local"
        _require(wants_window == (self.sliding_window is not None), "sliding_window",
                 f"{'needed' if wants_window else 'not allowed'} for a {self.kind!r} layer")
        _require(wants_chunk == (self.attention_chunk_size is not None), "attention_chunk_size",
                 f"{'needed' if wants_chunk else 'not allowed'} for a {self.kind!r} layer")
        _require((self.sliding_window or 1) >= 1, "sliding_window",
                 f"must be >= 1 (got {self.sliding_window})")
        _require((self.attention_chunk_size or 1) >= 1, "attention_chunk_size",
                 f"must be >= 1 (got {self.attention_chunk_size})")
        if self.kind == "mamba":
            self._check_mamba()
        else:
            _require(self.num_kv_heads >= 1, "num_kv_heads",
                     f"must be >= 1 (got {self.num_kv_heads})")
            _require(self.head_size >= 1, "head_size", f"must be >= 1 (got {self.head_size})")
            _require(not self.state_shapes and not self.state_dtypes, "state_shapes",
                     f"not allowed for a {self.kind!r} layer")

    def _check_mamba(self) -> None:
        _require(len(self.state_shapes) >= 1, "state_shapes", "a mamba layer needs at least one")
        _require(len(self.state_dtypes) == len(self.state_shapes), "state_dtypes",
                 f"one per state shape ({len(self.state_shapes)}), got {len(self.state_dtypes)}")
        for index, shape in enumerate(self.state_shapes):
            _require(len(shape) >= 1 and all(d >= 1 for d in shape), f"state_shapes[{index}]",
                     f"dimensions must be >= 1 (got {list(shape)})")
        for index, dtype in enumerate(self.state_dtypes):
            _require(dtype in DTYPE_BYTES, f"state_dtypes[{index}]",
                     f"unknown dtype {dtype!r} (known: {', '.join(DTYPE_BYTES)})")
        _require(self.num_kv_heads == 0 and self.head_size == 0, "num_kv_heads",
                 "not allowed for a mamba layer")

    @property
    def is_attention(self) -> bool:
        return self.kind != "mamba"

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token in this layer (attention layers only)."""
        return 2 * self.num_kv_heads * self.head_size * DTYPE_BYTES[self.dtype]

    @property
    def state_bytes(self) -> int:
        """One request's recurrent state in this layer (mamba layers only)."""
        return sum(math.prod(shape) * DTYPE_BYTES[dtype]
                   for shape, dtype in zip(self.state_shapes, self.state_dtypes, strict=True))


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """`dtype` is the model's dtype; layers carry their own (the cache dtype may differ)."""

    name: str
    layers: tuple[LayerSpec, ...]
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        _require(len(self.layers) >= 1, "layers", "a model needs at least one layer")
        _require(self.dtype in DTYPE_BYTES, "dtype", f"unknown dtype {self.dtype!r}")
        seen: set[str] = set()
        for index, layer in enumerate(self.layers):
            _require(layer.name not in seen, f"layers[{index}]",
                     f"duplicate layer name {layer.name!r}")
            seen.add(layer.name)

    @property
    def attention_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if layer.is_attention)

    @property
    def mamba_layers(self) -> tuple[LayerSpec, ...]:
        return tuple(layer for layer in self.layers if not layer.is_attention)

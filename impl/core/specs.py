"""KV-cache specs and config: what each group of layers needs per token, and how many blocks.

Our own dataclasses. Every spec validates itself and raises `ValueError` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def _require(condition: bool, field_name: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field_name}: {message}")


@dataclass(frozen=True, slots=True)
class AttentionSpec:
    block_size: int
    num_kv_heads: int = 1
    head_size: int = 64
    dtype: str = "float32"

    def __post_init__(self) -> None:
        _require(self.block_size >= 1, "block_size", f"must be >= 1 (got {self.block_size})")
        _require(self.num_kv_heads >= 1, "num_kv_heads", f"must be >= 1 (got {self.num_kv_heads})")
        _require(self.head_size >= 1, "head_size", f"must be >= 1 (got {self.head_size})")

    @property
    def type_id(self) -> str:
        return type(self).__name__

    @property
    def page_size_bytes(self) -> int:
        itemsize = 2 if self.dtype in ("float16", "bfloat16") else 4
        return 2 * self.block_size * self.num_kv_heads * self.head_size * itemsize

    @property
    def prefix_cacheable(self) -> bool:
        """Whether the group takes part in prefix caching (hit search, indexing)."""
        return True

    @property
    def prefix_replay_tokens(self) -> int:
        """Tokens the scheduler recomputes after a prefix hit to rebuild this group (0: none)."""
        return 0


@dataclass(frozen=True, slots=True)
class FullAttentionSpec(AttentionSpec):
    """Every token of the sequence stays in the cache."""


@dataclass(frozen=True, slots=True)
class ReferenceWindowSpec(FullAttentionSpec):
    """Reference sliding window (R-SWA): the prompt stays visible to every token, but of the
    generated tokens only the last `rswa_window` are attended to, so the blocks between the
    prompt's last block and the decode window can be dropped (per-request memory bounded by
    prompt + window instead of growing with the output). It is full attention for prefix
    caching: hits, caching and admission are full attention's."""

    rswa_window: int = 0

    def __post_init__(self) -> None:
        AttentionSpec.__post_init__(self)
        _require(self.rswa_window >= 1, "rswa_window", f"must be >= 1 (got {self.rswa_window})")

    @property
    def type_id(self) -> str:
        return f"reference_window_{self.rswa_window}"


@dataclass(frozen=True, slots=True)
class SlidingWindowSpec(AttentionSpec):
    """Only the last `sliding_window` tokens are attended to; older blocks can be dropped.

    `bounded_replay` (DeepSeek-V4.1's sliding windows): the group keeps no prefix cache; a hit
    found in the other groups is rebuilt here by recomputing its last window
    (`impl.sched.replay`), so its blocks are private to the request."""

    sliding_window: int = 0
    bounded_replay: bool = False

    def __post_init__(self) -> None:
        AttentionSpec.__post_init__(self)
        _require(self.sliding_window >= 1, "sliding_window",
                 f"must be >= 1 (got {self.sliding_window})")

    @property
    def type_id(self) -> str:
        suffix = "_replay" if self.bounded_replay else ""
        return f"sliding_window_{self.sliding_window}{suffix}"

    @property
    def prefix_cacheable(self) -> bool:
        return not self.bounded_replay

    @property
    def prefix_replay_tokens(self) -> int:
        return self.sliding_window if self.bounded_replay else 0

    def admission_cap_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """The most blocks one request can hold at once: the last `sliding_window - 1`
        processed tokens plus every token still in flight (blocks are freed on the processed
        basis), capped by `max_model_len`, plus one because the window rarely starts on a
        block boundary. The admission gate reserves no more than this per request."""
        num_tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return -(-num_tokens // self.block_size) + 1


@dataclass(frozen=True, slots=True)
class CircularBufferSpec(AttentionSpec):
    """One block per request used as a ring (`impl.core.circular_buffer`): `block_size` is its
    capacity; no prefix cache."""

    @property
    def type_id(self) -> str:
        return "circular_buffer"

    @property
    def prefix_cacheable(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class CrossAttentionSpec(AttentionSpec):
    """The decoder's cross-attention layers of an encoder-decoder model (Whisper): keys and
    values of the encoder's output, one slot per encoder embedding (`impl.core.cross_attention`);
    no prefix cache."""

    @property
    def type_id(self) -> str:
        return "cross_attention"

    @property
    def prefix_cacheable(self) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    """Tokens attend only within their chunk of `attention_chunk_size` tokens."""

    attention_chunk_size: int = 0

    def __post_init__(self) -> None:
        AttentionSpec.__post_init__(self)
        _require(self.attention_chunk_size >= 1, "attention_chunk_size",
                 f"must be >= 1 (got {self.attention_chunk_size})")

    @property
    def type_id(self) -> str:
        return f"chunked_local_{self.attention_chunk_size}"

    def admission_cap_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int:
        """The most blocks one request can hold at once: one chunk plus the tokens in
        flight, capped by `max_model_len` (see `SlidingWindowSpec.admission_cap_blocks`)."""
        num_tokens = min(self.attention_chunk_size + max_in_flight_tokens, max_model_len)
        return -(-num_tokens // self.block_size)


@dataclass(frozen=True, slots=True)
class MambaSpec:
    """A recurrent state per request instead of per-token KV: one block holds the whole state.

    `mamba_cache_mode` "none" keeps one state per request (no prefix caching); "all" caches the
    state at every block boundary; "align" caches it only at scheduled-chunk ends aligned to
    blocks.
    """

    block_size: int
    state_bytes: int = 4096
    num_speculative_blocks: int = 0
    mamba_cache_mode: str = "none"

    def __post_init__(self) -> None:
        _require(self.block_size >= 1, "block_size", f"must be >= 1 (got {self.block_size})")
        _require(self.num_speculative_blocks >= 0, "num_speculative_blocks",
                 f"must be >= 0 (got {self.num_speculative_blocks})")
        _require(self.mamba_cache_mode in ("none", "all", "align"), "mamba_cache_mode",
                 f"must be 'none', 'all' or 'align' (got {self.mamba_cache_mode!r})")

    @property
    def type_id(self) -> str:
        return "mamba"

    @property
    def prefix_cacheable(self) -> bool:
        return True

    @property
    def prefix_replay_tokens(self) -> int:
        return 0

    @property
    def page_size_bytes(self) -> int:
        return self.state_bytes


KVCacheSpec = (FullAttentionSpec | SlidingWindowSpec | ChunkedLocalAttentionSpec
               | CircularBufferSpec | CrossAttentionSpec | MambaSpec)


@dataclass(frozen=True, slots=True)
class KVCacheGroupSpec:
    """Layers that share one block table (same attention type, same block ids)."""

    layer_names: tuple[str, ...]
    kv_cache_spec: KVCacheSpec


@dataclass(frozen=True, slots=True)
class KVCacheConfig:
    """`prefix_cache_retention_interval` applies to sliding-window and mamba groups: None caches
    every block that could serve a hit; 0 (the engine default) only the blocks a replay of the
    prompt (or a shared prefix's junction) can reach; a positive multiple of the scheduler
    block size also the blocks that end each segment of that many tokens."""

    num_blocks: int
    kv_cache_groups: tuple[KVCacheGroupSpec, ...] = field(default_factory=tuple)
    prefix_cache_retention_interval: int | None = None
    # The DCP ranks whose shares a full-attention block spans; set (with the scaled block
    # sizes) only by `impl.core.context_parallel.dcp_scheduler_view`.
    dcp_world_size: int = 1

    def __post_init__(self) -> None:
        _require(self.num_blocks >= 1, "num_blocks", f"must be >= 1 (got {self.num_blocks})")
        retention = self.prefix_cache_retention_interval
        _require(retention is None or retention >= 0, "prefix_cache_retention_interval",
                 f"must be None (dense) or >= 0 (got {retention})")
        if retention and self.kv_cache_groups:
            _require(retention % lcm_block_size(self) == 0, "prefix_cache_retention_interval",
                     f"{retention} is not a multiple of the scheduler block size "
                     f"{lcm_block_size(self)}")

    @property
    def block_sizes(self) -> list[int]:
        return [group.kv_cache_spec.block_size for group in self.kv_cache_groups]


def check_hash_block_size(config: KVCacheConfig, hash_block_size: int) -> None:
    """Every group's block size must be a multiple of the hash block size."""
    _require(hash_block_size >= 1, "hash_block_size", f"must be >= 1 (got {hash_block_size})")
    for index, size in enumerate(config.block_sizes):
        _require(size % hash_block_size == 0, f"kv_cache_groups[{index}].block_size",
                 f"{size} is not a multiple of hash_block_size {hash_block_size}")


def lcm_block_size(config: KVCacheConfig) -> int:
    return math.lcm(*config.block_sizes) if config.kv_cache_groups else 1

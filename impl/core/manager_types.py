"""Which single-type manager runs each KV-cache spec, and how many tokens it needs slots for.

One manager class per attention type (`impl.core.full_attention`, `sliding_window`, ...). The
coordinator asks every manager for the same step, but not every type counts the same tokens:
cross-attention is sized by the encoder's output, and a type without drafter state
(`ignores_lookahead`) by the tokens without lookahead slots.
"""

from __future__ import annotations

from impl.core.chunked_local import ChunkedLocalAttentionManager
from impl.core.circular_buffer import CircularBufferManager
from impl.core.cross_attention import CrossAttentionManager
from impl.core.full_attention import FullAttentionManager
from impl.core.mamba import MambaManager
from impl.core.mamba_align import MambaAlignManager
from impl.core.reference_window import ReferenceWindowManager
from impl.core.single_type_manager import SingleTypeKVCacheManager
from impl.core.sliding_window import SlidingWindowManager
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    CircularBufferSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    ReferenceWindowSpec,
    SlidingWindowSpec,
)


def manager_class_for(spec: KVCacheSpec) -> type[SingleTypeKVCacheManager]:
    if isinstance(spec, CircularBufferSpec):
        return CircularBufferManager
    if isinstance(spec, CrossAttentionSpec):
        return CrossAttentionManager
    if isinstance(spec, SlidingWindowSpec):
        return SlidingWindowManager
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return ChunkedLocalAttentionManager
    if isinstance(spec, MambaSpec):
        return MambaAlignManager if spec.mamba_cache_mode == "align" else MambaManager
    if isinstance(spec, ReferenceWindowSpec):
        return ReferenceWindowManager
    if isinstance(spec, FullAttentionSpec):
        return FullAttentionManager
    raise ValueError(f"kv_cache_spec: unsupported spec type {type(spec).__name__}")


def tokens_for(manager: SingleTypeKVCacheManager, num_tokens: int, num_tokens_main: int | None,
                num_encoder_tokens: int) -> int:
    """The tokens a group needs slots for: the encoder's for cross-attention, the decoder's
    without lookahead for types that take none, the decoder's otherwise."""
    if manager.sized_by_encoder:
        return num_encoder_tokens
    if manager.ignores_lookahead and num_tokens_main is not None:
        return num_tokens_main
    return num_tokens

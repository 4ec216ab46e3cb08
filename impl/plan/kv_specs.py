"""Per-layer KV-cache specs as the planner reasons about them: block size, page and padding.

A page is what one block of one layer occupies: `block_size` tokens of K and V for attention,
one whole recurrent state for mamba (its size does not depend on the block size, which is why a
mamba page can only be padded, never grown by more tokens). `page_size_padded`, when set, is the
page every block of the layer really takes; the bytes past the data are waste, accepted so that
every layer of a group and every group of the pool share one page size.

`kind` "full" may still remember a window or chunk: that is a local layer promoted to full
allocation (hybrid manager off), which attends locally but keeps every token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from impl.plan.layers import DTYPE_BYTES

AttentionKind = Literal["full", "sliding_window", "chunked_local", "cross_attention"]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class AttentionKV:
    kind: AttentionKind
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    page_size_padded: int | None = None

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_size * DTYPE_BYTES[self.dtype]

    @property
    def content_bytes(self) -> int:
        """One head's K and V of one token: the innermost axis C of the physical layout."""
        return 2 * self.head_size * DTYPE_BYTES[self.dtype]

    @property
    def unpadded_page_size_bytes(self) -> int:
        return self.block_size * self.bytes_per_token

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded or self.unpadded_page_size_bytes

    @property
    def type_key(self) -> tuple[str, int]:
        """Layers with equal keys need the same number of blocks for any request, so they may
        share a group even if their pages differ."""
        if self.kind == "sliding_window":
            return ("sliding_window", self.sliding_window or 0)
        if self.kind == "chunked_local":
            return ("chunked_local", self.attention_chunk_size or 0)
        if self.kind == "cross_attention":
            return ("cross_attention", 0)
        return ("full", 0)

    def blocks_per_request(self, max_model_len: int, max_in_flight: int,
                           max_encoder_tokens: int = 0) -> int:
        """The most blocks one request can hold: every token for full attention; for a window,
        the last `window - 1` settled tokens plus those in flight, plus one because the window
        seldom starts on a block boundary; for a chunk, one chunk plus those in flight; for
        cross-attention, the encoder's output (at most what it takes in a step)."""
        if self.kind == "cross_attention":
            return cdiv(max_encoder_tokens, self.block_size)
        if self.kind == "sliding_window":
            window = self.sliding_window or 0
            return cdiv(min(window - 1 + max_in_flight, max_model_len), self.block_size) + 1
        if self.kind == "chunked_local":
            chunk = self.attention_chunk_size or 0
            return cdiv(min(chunk + max_in_flight, max_model_len), self.block_size)
        return cdiv(max_model_len, self.block_size)

    def axes(self) -> tuple[int, int, int]:
        """(H, N, C) of one page: heads, token slots, bytes per slot and head."""
        return (self.num_kv_heads, self.block_size, self.content_bytes)

    def scaled(self, ratio: int) -> AttentionKV:
        return replace(self, block_size=self.block_size * ratio)

    def padded(self, page_size: int) -> AttentionKV:
        return replace(self, page_size_padded=page_size)

    def same_cache(self, other: object) -> bool:
        """Equal in everything a cache buffer depends on (the window or chunk a promoted full
        layer remembers does not count): such layers can merge into one group spec."""
        return (isinstance(other, AttentionKV) and self.kind == other.kind == "full"
                and replace(self, sliding_window=None, attention_chunk_size=None)
                == replace(other, sliding_window=None, attention_chunk_size=None))


@dataclass(frozen=True, slots=True)
class MambaKV:
    """`mamba_cache_mode` "align" (prefix caching on) keeps the running state plus one cached
    at a block boundary; "none" keeps one state per request."""

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    block_size: int
    page_size_padded: int | None = None
    mamba_cache_mode: str = "none"

    @property
    def kind(self) -> Literal["mamba"]:
        return "mamba"

    @property
    def content_bytes(self) -> int:
        return sum(math.prod(shape) * DTYPE_BYTES[dtype]
                   for shape, dtype in zip(self.shapes, self.dtypes, strict=True))

    @property
    def unpadded_page_size_bytes(self) -> int:
        return self.content_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded or self.content_bytes

    @property
    def type_key(self) -> tuple[str, int]:
        return ("mamba", self.page_size_bytes)

    def blocks_per_request(self, max_model_len: int, max_in_flight: int,
                           max_encoder_tokens: int = 0) -> int:
        del max_model_len, max_in_flight, max_encoder_tokens  # a state does not grow
        return 2 if self.mamba_cache_mode == "align" else 1

    def axes(self) -> tuple[int, int, int]:
        return (1, 1, self.content_bytes)

    def padded(self, page_size: int) -> MambaKV:
        return replace(self, page_size_padded=page_size)

    def same_cache(self, other: object) -> bool:
        return False


LayerKV = AttentionKV | MambaKV

"""Windowed groups in the CPU tier: sliding-window and chunked-local attention, and mamba.

A windowed layer reads only the tokens of its window, so a hit needs only the chunks just
before where it ends, not the whole prefix:

* **How many chunks.** A sliding window of W tokens needs the chunks holding the W - 1
  tokens before the first token computed again (and at least the W tokens' worth); a
  chunked-local layer never reads back past one attention chunk. A hit that ends inside a
  chunk (the chunk is rounded up when looked up) may need one chunk more on the left for a
  sliding window: `load_window`.
* **Looking it up.** From the right end of the candidate range, the first run of that many
  chunks all present decides the hit (`window_lookup`); chunks left of it may be missing. A
  chunk still being written counts toward the run but defers the answer. A mamba 'align'
  group needs one chunk (the state where the hit ends), and a hit beside it ends on a whole
  chunk of it (`mamba_align_tokens`).
* **What is worth storing.** With a full-attention group beside it, every hit ends on a
  full-attention chunk boundary (`alignment_tokens`), so only the sliding window's blocks
  just before each boundary can ever be loaded back, plus the tail before the end of the
  request's last segment (its prompt while it prefills, its end once finished): `store_mask`.
  Chunked-local groups store every chunk; a mamba group every state, or under sparse
  retention the states ending each segment and at the reachable boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from impl.connector.offloading.keys import LookupResult, OffloadKey
from impl.core.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)

if TYPE_CHECKING:
    from impl.connector.offloading.manager import CPUOffloadingManager
    from impl.connector.offloading.request_state import GroupShape


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def is_offloadable(spec: KVCacheSpec) -> bool:
    """Group kinds the twin's OffloadingConnector models: full attention (a reference window
    is one), sliding windows (not bounded replay's, which keep no prefix cache), chunked-local
    attention and mamba in 'align' mode (its states cached at block boundaries)."""
    if isinstance(spec, SlidingWindowSpec):
        return not spec.bounded_replay
    if isinstance(spec, MambaSpec):
        return spec.mamba_cache_mode == "align"
    return isinstance(spec, FullAttentionSpec | ChunkedLocalAttentionSpec)


def check_offloading_supported(kv_cache_config: KVCacheConfig, hash_block_size: int) -> None:
    """Configurations the twin's OffloadingConnector does not model, refused by field."""
    for index, group in enumerate(kv_cache_config.kv_cache_groups):
        if not is_offloadable(group.kv_cache_spec):
            raise ValueError(f"kv_connector: the OffloadingConnector with a "
                             f"{group.kv_cache_spec.type_id} group (group {index}) is not "
                             "implemented by the twin; full-attention, sliding-window, "
                             "chunked-local and mamba 'align' groups are")
        if group.kv_cache_spec.block_size % hash_block_size:
            raise ValueError(f"kv_connector: group {index}'s block size is not a multiple of "
                             f"hash_block_size {hash_block_size}")


def window_in_chunks(spec: KVCacheSpec, tokens_per_chunk: int) -> int | None:
    """Chunks a hit needs in a group of `spec` (None: the whole prefix, full attention)."""
    if isinstance(spec, SlidingWindowSpec):
        return max(_cdiv(spec.sliding_window, tokens_per_chunk),
                   _cdiv(spec.sliding_window - 1, tokens_per_chunk))
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return _cdiv(spec.attention_chunk_size, tokens_per_chunk)
    if isinstance(spec, MambaSpec):
        return 1  # one state, the one at the hit's end
    return None


def mamba_align_tokens(shapes: Sequence[GroupShape]) -> int | None:
    """Where a hit beside a mamba 'align' group must end: on a whole chunk of that group (its
    state is only kept at chunk ends). None: no such group."""
    sizes = {shape.tokens_per_chunk for shape in shapes
             if isinstance(shape.spec, MambaSpec) and shape.spec.mamba_cache_mode == "align"}
    assert len(sizes) <= 1, "mamba groups share one block size"
    return sizes.pop() if sizes else None


def load_window(spec: KVCacheSpec, window: int | None, tokens_per_chunk: int,
                hit_end: int) -> int | None:
    """Chunks a load ending at token `hit_end` reads: a sliding window's hit that ends inside
    a chunk still needs the W - 1 tokens before it, which may start one chunk further left."""
    if window is None or not isinstance(spec, SlidingWindowSpec):
        return window
    padding = -hit_end % tokens_per_chunk
    return max(window, _cdiv(spec.sliding_window - 1 + padding, tokens_per_chunk))


def window_lookup(manager: CPUOffloadingManager, keys: Sequence[OffloadKey], window: int,
                  first_window: int) -> int | None:
    """End (in `keys`) of the rightmost run of `window` present chunks, scanning from the
    right; the first run, touching the right end, needs `first_window`. With no such run,
    the run of present chunks at the left end (0: none). None: a chunk of the run that
    decides is still being written, or one right of it was (the manager is asked about every
    chunk up to the decision all the same)."""
    pending = False
    run = 0
    needed = first_window
    for index in range(len(keys) - 1, -1, -1):
        result = manager.lookup(keys[index])
        if result is LookupResult.MISS:
            run = 0
            pending = False  # a gap: the run right of it cannot decide any more
            needed = window
        else:
            pending |= result is LookupResult.HIT_PENDING
            run += 1
        if run == needed:
            return None if pending else index + needed
    return None if pending else run


def store_mask(spec: KVCacheSpec, start_block: int, end_block: int, *,
               alignment_tokens: int | None, final_end_block: int | None,
               retention_interval: int | None,
               boundaries: Sequence[int]) -> list[bool] | None:
    """Which blocks in [start_block, end_block) of a group can ever serve a hit (None: all).

    Only a sliding window is sparse, and only when hits align to whole blocks of it: then a
    block is kept if it lies in the window's run before an aligned boundary (every
    `alignment_tokens`, or every `retention_interval`; with a retention of 0 none), in the
    run before the end of the last segment (`final_end_block`, when that segment is partial),
    or, with a retention interval, in the run before each of `boundaries` (the prompt's last
    token and a shared prefix's junction), each rounded down to an alignment."""
    if isinstance(spec, MambaSpec):
        return _mamba_store_mask(spec.block_size, start_block, end_block,
                                 alignment_tokens=alignment_tokens,
                                 retention_interval=retention_interval, boundaries=boundaries)
    if not isinstance(spec, SlidingWindowSpec) or alignment_tokens is None:
        return None
    block_size = spec.block_size
    if alignment_tokens % block_size:
        return None  # a boundary inside a block: every block may serve a hit
    needed = _cdiv(spec.sliding_window - 1, block_size)
    mask = [False] * (end_block - start_block)
    segment = alignment_tokens if retention_interval is None else retention_interval or None
    if segment is not None:
        per_segment = segment // block_size
        if needed >= per_segment:
            return None
        for index in range(start_block, end_block):
            if index % per_segment >= per_segment - needed:
                mask[index - start_block] = True
        partial = 0 if final_end_block is None else final_end_block % per_segment
        if final_end_block is not None and partial:
            tail_start = max(final_end_block - partial, final_end_block - needed)
            for index in range(max(start_block, tail_start), min(end_block, final_end_block)):
                mask[index - start_block] = True
    if retention_interval is not None:
        for boundary in boundaries:
            end = boundary // alignment_tokens * alignment_tokens // block_size
            for index in range(max(start_block, end - needed), min(end_block, end)):
                mask[index - start_block] = True
    return mask


def _mamba_store_mask(block_size: int, start_block: int, end_block: int, *,
                      alignment_tokens: int | None, retention_interval: int | None,
                      boundaries: Sequence[int]) -> list[bool] | None:
    """A mamba hit reads the one state block ending where it ends. Dense caching (no
    retention interval) keeps every block; sparse retention keeps the state ending each
    segment of the interval (none with 0) and the state at each reachable boundary rounded
    down to an alignment."""
    if retention_interval is None or alignment_tokens is None:
        return None
    mask = [False] * (end_block - start_block)
    if retention_interval:
        per_segment = retention_interval // block_size
        if per_segment <= 1:
            return None  # every block ends a segment
        for index in range(start_block, end_block):
            mask[index - start_block] = (index + 1) % per_segment == 0
    for boundary in boundaries:
        block = boundary // alignment_tokens * alignment_tokens // block_size - 1
        if start_block <= block < end_block:
            mask[block - start_block] = True
    return mask

"""Decode-context-parallel sizes for generated engine configs (`workloads.context_parallel`).

DCP is drawn only where the twin models it (full attention, and mamba 'align' with prefix
caching on; hashes at their default), so it scales the blocks of layouts the other draws
already exercise.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from workloads.model import KVCacheGroup


def context_parallel_sizes(draw: Any, groups: tuple[KVCacheGroup, ...],
                           hash_block_size: int | None, caching: bool,
                           always: bool = False) -> int:
    """decode_context_parallel_size for one config; `always`: DCP on (the layout must allow
    it)."""
    dcp = 1
    if hash_block_size is None and all(
            g.type == "full" or g.mamba_cache_mode == "align" and caching for g in groups):
        dcp = draw(st.sampled_from((2, 4) if always else (1, 1, 2, 4)),
                   label="decode_context_parallel_size")
    return dcp
